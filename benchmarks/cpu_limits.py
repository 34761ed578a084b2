"""
What this CPU allows the float32 biLM at most, to set `embed_speed.py`'s ratios against:

- batch 1 (memory bound): every LSTM step reads all recurrent and projection weights of both
  directions; positions/s <= memory bandwidth / those bytes. Bandwidth: `torch.sum` over
  512 MB, the best of five, on 1 and on all threads.
- batch 64 (compute bound): every matrix product one forward pass makes (recorded from
  `Kernels.product` during a real pass, with its role and input shape), timed again alone
  with the kernel the biLM used, and summed: tokens/s <= tokens / that sum. Everything else
  (gates, pooling, copies) is left out, so the real figure must be lower.

    python benchmarks/cpu_limits.py [--threads 2] [--batch-size 64]

Original architecture (2x4096_512_2048cnn_2xhighway), random weights, the sentences of
`embed_speed.py`. Prints the CPU model and flags and the kernel choice mode.
"""
import sys
from pathlib import Path
import argparse
import tempfile
import time
from collections import defaultdict
from typing import Dict, List, Tuple

import torch

# The repository root, for the tests' random-weight helper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.kernels import choice, products
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.pretrained import ORIGINAL_OPTIONS
from tests.random_weights import write_random_elmo  # noqa: E402
from embed_speed import SHARED, cpu_description, sentences


def bandwidth_gb_per_s(threads: int) -> float:
    torch.set_num_threads(threads)
    data = torch.ones(128 * 2**20)  # 512 MB
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best / 1e9


def weight_bytes_per_step(options: ElmoOptions) -> int:
    p, c = options.projection_dim, options.cell_dim
    return 4 * 2 * options.n_layers * (p * 4 * c + 4 * c + c * p)


def recorded_products(bilm: ElmoBiLm, ids: torch.Tensor) -> List[Tuple[str, products.Product, torch.Size]]:
    """Every product of one forward pass: (role, the product function used, input shape)."""
    calls: List[Tuple[str, products.Product, torch.Size]] = []
    original = products.Kernels.product

    def recording(self, role, layer, rows=None):
        product = original(self, role, layer, rows)

        def recorded(inputs):
            calls.append((role.value, product, inputs.shape))
            return product(inputs)

        return recorded

    products.Kernels.product = recording
    try:
        with torch.no_grad():
            bilm(ids)
    finally:
        products.Kernels.product = original
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; kernel choice: {choice.mode()}; threads {args.threads}")
    single, every = bandwidth_gb_per_s(1), bandwidth_gb_per_s(args.threads)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        options_file, weight_file = write_random_elmo(work, ORIGINAL_OPTIONS, seed=0)
        options = ElmoOptions.from_file(options_file)
        bilm = ElmoBiLm(options_file, weight_file).eval()
    step_bytes = weight_bytes_per_step(options)
    print(f"memory bandwidth (torch.sum over 512 MB): {single:.1f} GB/s on 1 thread, {every:.1f} on {args.threads}")
    print(f"batch 1: {step_bytes / 1e6:.0f} MB of LSTM weights per position -> at most "
          f"{every * 1e9 / step_bytes:.0f} positions/s")
    data = sentences(args.batch_size, SHARED / "data" / "lm_eval" / "wikitext2.valid.txt")
    ids = batch_to_ids(data)
    tokens = sum(len(sentence) for sentence in data)
    with torch.no_grad():
        bilm(ids)  # kernel choices made and caches warm before recording
    calls = recorded_products(bilm, ids)
    seconds: Dict[str, float] = defaultdict(float)
    with torch.no_grad():
        for role, product, shape in calls:
            inputs = torch.randn(shape)
            product(inputs)
            start = time.perf_counter()
            product(inputs)
            seconds[role] += time.perf_counter() - start
    total = sum(seconds.values())
    print(f"batch {args.batch_size}: {tokens} tokens, {len(calls)} products, their time alone "
          f"{total * 1e3:.0f} ms -> at most {tokens / total:.0f} tokens/s")
    for role, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"  {role}: {spent * 1e3:.0f} ms ({100 * spent / total:.0f}%)")


if __name__ == "__main__":
    main()
