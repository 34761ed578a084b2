"""
Substitutes in context (`ElmoBiLmPredictor.substitutes`): sentences per second, with the small
architecture (random weights) and a softmax over the words of WikiText-2's validation and test
text seen at least twice; WikiText-2 sentences of 3-60 tokens.

    python benchmarks/substitutes_speed.py [--sentences 200] [--vocabulary-lines 50000] [--top-k 10] [--threads 2]

The vocabulary: words seen at least twice in `--vocabulary-lines` lines (the softmax's size is
most of the cost of a substitute list).
"""
import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from file_embedding_speed import make_input  # noqa: E402

from elmo_plugin import ElmoBiLmPredictor  # noqa: E402
from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader  # noqa: E402
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary  # noqa: E402
from elmo_plugin.data.special_tokens import SPECIAL_TOKENS  # noqa: E402
from elmo_plugin.models.bilm import ElmoBiLmModel  # noqa: E402
from elmo_plugin.weights.pretrained import SMALL_OPTIONS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vocabulary-lines", type=int, default=50000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "input.txt"
        make_input(path, max(args.sentences, args.vocabulary_lines))
        lines = path.read_text(encoding="utf-8").splitlines()
    sentences = lines[: args.sentences]
    counts = collections.Counter(word for line in lines[: args.vocabulary_lines] for word in line.split())
    words = list(SPECIAL_TOKENS) + [word for word, count in counts.most_common() if count >= 2]
    vocabulary = BiLmVocabulary(non_padded_namespaces=["lm_tokens"], oov_token="<UNK>")
    vocabulary.add_tokens_to_namespace(words, "lm_tokens")
    model = ElmoBiLmModel(vocabulary, options=SMALL_OPTIONS, num_samples=min(8192, len(words) - 1)).eval()
    predictor = ElmoBiLmPredictor(model, BiLmCorpusReader())
    tokens = sum(len(line.split()) for line in sentences)
    print(f"{len(sentences)} sentences ({tokens} tokens), softmax of {len(words)} words, small architecture, "
          f"{args.threads} threads, top {args.top_k}", flush=True)
    rates = []
    for round_ in range(args.rounds):
        start = time.perf_counter()
        for sentence in sentences:
            predictor.substitutes(sentence, top_k=args.top_k)
        seconds = time.perf_counter() - start
        rates.append(len(sentences) / seconds)
        print(f"round {round_ + 1}: {rates[-1]:.1f} sentences/s ({tokens / seconds:.0f} words/s)", flush=True)
    print(f"median: {statistics.median(rates):.1f} sentences/s", flush=True)


if __name__ == "__main__":
    main()
