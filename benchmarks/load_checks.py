"""
What the load-time checks cost (the finiteness of every weight): reading the original ELMo
architecture's weights (random, written in the published layout) with and without the check,
interleaved, best and median of `--repeats`.

    python benchmarks/load_checks.py [--repeats 7] [--architecture original]
"""
import sys
from pathlib import Path
import argparse
import statistics
import tempfile
import time

import torch

# The repository root, for the tests' random-weight helper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import elmo_plugin  # noqa: F401
from elmo_plugin.weights import pretrained
from elmo_plugin.weights.formats import base
from tests.random_weights import write_random_elmo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--architecture", choices=sorted(pretrained.ARCHITECTURE_OPTIONS), default="original")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        options_file, weight_file = write_random_elmo(directory, pretrained.ARCHITECTURE_OPTIONS[args.architecture])
        timings = {"read": [], "read + finiteness check": [], "check alone": []}
        check = base.refuse_non_finite
        for _ in range(args.repeats):
            base.refuse_non_finite = lambda weights: None
            start = time.perf_counter()
            weights = base.read_bilm_weights(options_file, weight_file)
            timings["read"].append(time.perf_counter() - start)
            base.refuse_non_finite = check
            start = time.perf_counter()
            base.read_bilm_weights(options_file, weight_file)
            timings["read + finiteness check"].append(time.perf_counter() - start)
            start = time.perf_counter()
            check(weights)
            timings["check alone"].append(time.perf_counter() - start)
        size = sum(array.nbytes for array in weights.arrays.values())
    print(f"{args.architecture} architecture, {size / 2**20:.0f} MiB of weights, {args.repeats} repeats")
    for name, values in timings.items():
        print(f"  {name:26s} best {min(values):.3f} s   median {statistics.median(values):.3f} s")


if __name__ == "__main__":
    main()
