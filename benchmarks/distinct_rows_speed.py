"""
The distinct tokens of a batch: `torch.unique(ids, dim=0, return_inverse=True)` against
`distinct_rows` (packed keys, `modules/distinct_rows.py`), in one process, alternated, on
Brown's text at the shapes the package meets: a biLM training step's windows (both
directions' tokens, `--streams` x 20 each) and `ElmoEmbedder` batches of 1 and 64 sentences.

    python benchmarks/distinct_rows_speed.py [--streams 32] [--rounds 200] [--threads 2]

Needs ../shared/data/brown.zip.
"""
import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elmo_plugin.data.character_mapper import batch_to_ids  # noqa: E402
from elmo_plugin.modules.distinct_rows import distinct_rows  # noqa: E402
from embed_speed import cpu_description  # noqa: E402
from train_bilm import WINDOW_SIZE, brown_sentences  # noqa: E402


def batches(streams: int) -> Dict[str, torch.Tensor]:
    """`(tokens, 50)` character ids per shape, from Brown's text in its order."""
    sentences = [sentence.split() for sentence in brown_sentences()[:2000]]
    words = list(itertools.chain.from_iterable(sentences))
    # Each stream a window of consecutive words, for each direction.
    per_direction = streams * WINDOW_SIZE
    windows = [words[start : start + WINDOW_SIZE] for start in range(0, 2 * per_direction, WINDOW_SIZE)]
    return {
        f"training step, {streams} streams x {WINDOW_SIZE} x 2 directions": batch_to_ids(windows),
        "embedding batch of 1 sentence": batch_to_ids(sentences[:1]),
        "embedding batch of 64 sentences": batch_to_ids(sentences[:64]),
    }


def seconds_each(function: Callable[[], object], rounds: int) -> List[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {args.threads} threads")
    for label, character_ids in batches(args.streams).items():
        ids = character_ids.view(-1, character_ids.size(-1))
        expected = torch.unique(ids, dim=0, return_inverse=True)
        found = distinct_rows(ids)
        assert all(torch.equal(a, b) for a, b in zip(expected, found)), label
        times = {"torch.unique": [], "distinct_rows": []}
        for _ in range(args.rounds // 10):  # alternated, so that drift hits both alike
            times["torch.unique"] += seconds_each(lambda: torch.unique(ids, dim=0, return_inverse=True), 10)
            times["distinct_rows"] += seconds_each(lambda: distinct_rows(ids), 10)
        medians = {name: sorted(values)[len(values) // 2] * 1e3 for name, values in times.items()}
        print(
            f"{label}: {ids.size(0)} rows, {expected[0].size(0)} distinct; torch.unique "
            f"{medians['torch.unique']:.3f} ms, distinct_rows {medians['distinct_rows']:.3f} ms "
            f"({medians['torch.unique'] / medians['distinct_rows']:.1f}x), equal outputs"
        )


if __name__ == "__main__":
    main()
