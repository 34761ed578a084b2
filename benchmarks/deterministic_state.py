"""
How close are deterministic-mode vectors to AllenNLP's carried-state vectors?

The biLM was trained with state carried from sentence to sentence, so carried-state vectors
are what it "expects". Deterministic mode must pick one start state for every sentence; this
compares two choices against carried state, for the biLM trained by the original TensorFlow
code (../shared/fixtures/elmo):

- zero: all-zero LSTM state;
- fixed point (our choice): the state the biLM settles in after reading empty sentences.

As a yardstick it also compares carried state with itself under a different sentence order:
that is how much carried-state vectors already move with nothing but the file order.

    python benchmarks/deterministic_state.py [--sentences N]

Prints, per LSTM layer, the mean cosine similarity to the carried-state vectors and the mean
relative L2 distance, over all tokens and over the first three tokens of each sentence (where
the start state matters most).
"""
import argparse
import json
import random
from pathlib import Path
from typing import Dict, List

import torch

import elmo_plugin  # noqa: F401
from elmo_plugin import ElmoBiLm, batch_to_ids

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
FIXTURE = SHARED / "fixtures" / "elmo"
BATCH_SIZE = 3


def load_sentences(limit: int) -> List[List[str]]:
    with open(FIXTURE / "sentences.json") as handle:
        sentences = [s.split() for group in json.load(handle) for s in group]
    wikitext = SHARED / "data" / "lm_eval" / "wikitext2.valid.txt"
    if wikitext.exists():
        for line in wikitext.read_text(encoding="utf-8").splitlines():
            tokens = line.split()
            if 3 <= len(tokens) <= 60 and not line.lstrip().startswith("="):
                sentences.append(tokens)
    return sentences[:limit]


@torch.no_grad()
def embed(bilm: ElmoBiLm, sentences: List[List[str]], order: List[int]) -> Dict[int, List[torch.Tensor]]:
    """Layers 1..n (without <S>/</S>) of each sentence, fed in `order`, BATCH_SIZE at a time."""
    bilm.reset_states()
    vectors = {}
    for start in range(0, len(order), BATCH_SIZE):
        indices = order[start : start + BATCH_SIZE]
        output = bilm(batch_to_ids([sentences[i] for i in indices]))
        for row, index in enumerate(indices):
            length = len(sentences[index])
            vectors[index] = [layer[row, 1 : length + 1] for layer in output["activations"][1:]]
    return vectors


def compare(candidate, reference, sentences, first_tokens=None):
    rows = []
    for layer in range(len(next(iter(reference.values())))):
        cosines, distances = [], []
        for index in range(len(sentences)):
            a, b = candidate[index][layer], reference[index][layer]
            if first_tokens is not None:
                a, b = a[:first_tokens], b[:first_tokens]
            cosines.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
            distances.append((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-12))
        rows.append((torch.cat(cosines).mean().item(), torch.cat(distances).mean().item()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=600)
    args = parser.parse_args()
    sentences = load_sentences(args.sentences)
    order = list(range(len(sentences)))
    shuffled = order[:]
    random.Random(0).shuffle(shuffled)

    options, weights = str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5")
    carried = ElmoBiLm(options, weights, stateful=True)
    reference = embed(carried, sentences, order)
    candidates = {"carried, other order": embed(carried, sentences, shuffled)}

    deterministic = ElmoBiLm(options, weights, stateful=False)
    candidates["fixed point (ours)"] = embed(deterministic, sentences, order)
    deterministic.lstm.batch_start_state.fixed_point = None  # every sentence from zeros
    candidates["zero state"] = embed(deterministic, sentences, order)

    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} tokens, batch size {BATCH_SIZE}; "
          "reference: carried state in file order")
    print(f"{'start state':<22} {'tokens':<8} " + " ".join(
        f"{'layer ' + str(l + 1) + ' cos':>12} {'rel. L2':>8}" for l in range(len(reference[0]))))
    for name, vectors in candidates.items():
        for label, first in (("all", None), ("first 3", 3)):
            cells = " ".join(f"{c:>12.4f} {d:>8.4f}" for c, d in compare(vectors, reference, sentences, first))
            print(f"{name:<22} {label:<8} {cells}")


if __name__ == "__main__":
    main()
