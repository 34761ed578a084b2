"""
An ELMoForManyLangs model embedded by ELMoForManyLangs' own `Embedder.sents2elmo` and by our
`ElmoEmbedder`, interleaved in one process: tokens/s, and the largest difference per layer.

    python benchmarks/elmoformanylangs_speed.py [--passes 3] [--sentences 256] [--threads 2]

The model is made by ELMoForManyLangs' own code (`tests/fixtures/elmoformanylangs_model.py`)
with random weights, in the architecture of its published models
(`cnn_50_100_512_4096_sample.json`: 50-dim characters, 100-dim words, the original ELMo's CNN,
two layers of 4096 cells projected to 512), its vocabularies built from the sentences:
WikiText-2 validation lines of 10-30 tokens. Both carry state as ELMoForManyLangs does, and
both are given the same batches in the same order: `sents2elmo` sorts all sentences by length,
cuts batches of 64 and runs them in an order drawn with `random.shuffle`; ours is given those
batches in the order the same draw gives (the same seed before both), so every vector is
comparable. The figure that counts is the ratio.
"""
import argparse
import collections
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy
import torch

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from elmo_plugin import ElmoEmbedder
    from elmo_plugin.weights.formats.elmoformanylangs import PACKAGED_ARCHITECTURES
    from tests.fixtures.elmoformanylangs_model import import_elmoformanylangs, make_model

    lines = (SHARED / "data" / "lm_eval" / "wikitext2.valid.txt").read_text(encoding="utf-8").splitlines()
    sentences = [line.split() for line in lines if 10 <= len(line.split()) <= 30 and not line.startswith(" =")]
    sentences = sentences[: args.sentences]
    tokens = sum(len(sentence) for sentence in sentences)
    counts = collections.Counter(token for sentence in sentences for token in sentence)
    architecture = dict(PACKAGED_ARCHITECTURES["cnn_50_100_512_4096_sample.json"], dropout=0.1)

    with tempfile.TemporaryDirectory() as work:
        directory = make_model(
            str(Path(work) / "model"), config=architecture,
            characters="".join(sorted({c for sentence in sentences for token in sentence for c in token})),
            words=[word for word, count in counts.most_common() if count >= 2],
        )
        theirs = import_elmoformanylangs().Embedder(directory, batch_size=args.batch_size)
        ours = ElmoEmbedder(weight_file=directory, stateful=True)
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        batches = [[sentences[i] for i in order[start:start + args.batch_size]]
                   for start in range(0, len(order), args.batch_size)]
        rates = {"elmoformanylangs": [], "ours": []}
        differences = numpy.zeros(3)
        with torch.no_grad():
            for pass_index in range(args.passes):
                theirs.model.encoder.reset_states()
                ours.elmo_bilm.reset_states()
                random.seed(pass_index)
                start = time.perf_counter()
                expected = theirs.sents2elmo(sentences, output_layer=-2)
                rates["elmoformanylangs"].append(tokens / (time.perf_counter() - start))
                random.seed(pass_index)
                batch_order = list(range(len(batches)))
                random.shuffle(batch_order)  # the draw sents2elmo made
                start = time.perf_counter()
                actual = {b: ours.embed_batch(batches[b]) for b in batch_order}
                rates["ours"].append(tokens / (time.perf_counter() - start))
                for b, vectors in actual.items():
                    for row, index in enumerate(order[b * args.batch_size : (b + 1) * args.batch_size]):
                        differences = numpy.maximum(
                            differences, numpy.abs(vectors[row] - expected[index]).max(axis=(1, 2)))
    their_rate, our_rate = (statistics.median(rates[name]) for name in ("elmoformanylangs", "ours"))
    print(f"{len(sentences)} sentences, {tokens} tokens, batches of {args.batch_size}, {args.threads} threads, "
          f"median of {args.passes} interleaved passes")
    print(f"ELMoForManyLangs' Embedder: {their_rate:.1f} tokens/s; ours: {our_rate:.1f} tokens/s; "
          f"ratio {our_rate / their_rate:.2f}")
    print("largest difference per layer, all sentences, all passes (token layer, LSTM 1, LSTM 2): "
          + ", ".join(f"{value:.2e}" for value in differences))


if __name__ == "__main__":
    main()
