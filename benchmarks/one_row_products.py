"""
The one-row product that bounds embedding one sentence at a time: the LSTM's recurrent
product, (1, 512) x (512, 16384), read from memory at every step by both directions side by
side (as `ElmoLstm` runs them where that is faster: two threads, one torch thread each).

    python benchmarks/one_row_products.py [--matrices 8] [--rounds 20]

Each thread cycles through `--matrices` different weights (more than the caches hold), so
every product reads its weight from memory. Printed per weight format: milliseconds per pair
of products (one per thread) and the weight bytes read per second by both together, next to
the bandwidth `torch.sum` reaches over 512 MB on the same two threads.
"""
import sys
import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elmo_plugin.kernels import mkl_packed, onednn  # noqa: E402
from elmo_plugin.kernels.reduced_precision import PackedLinear  # noqa: E402
from cpu_limits import bandwidth_gb_per_s  # noqa: E402
from embed_speed import cpu_description  # noqa: E402

IN_FEATURES, OUT_FEATURES = 512, 16384


Product = Callable[[int, torch.Tensor], torch.Tensor]


def formats(weights: List[torch.Tensor]) -> Dict[str, Tuple[int, Product]]:
    """Each format's bytes per weight value and product `(index of the weight, one row) -> result`."""
    plain_bfloat16 = [weight.bfloat16() for weight in weights]
    packed_bfloat16 = [PackedLinear(weight, None, "bfloat16") for weight in weights]
    packed_int8 = [PackedLinear(weight, None, "int8") for weight in weights]
    found = {
        "float32, oneDNN": (4, lambda i, row: onednn.linear(row, weights[i], None)),
        "bfloat16, PyTorch's layout": (2, lambda i, row: torch.nn.functional.linear(row.bfloat16(), plain_bfloat16[i])),
        "bfloat16, oneDNN's layout (ours)": (2, lambda i, row: packed_bfloat16[i](row)),
        "int8 (ours)": (1, lambda i, row: packed_int8[i](row)),
    }
    if mkl_packed.available():
        packed = [mkl_packed.pack(weight) for weight in weights]
        found["float32, MKL packed"] = (4, lambda i, row: mkl_packed.packed_product(packed[i], weights[i], None)(row))
    return found


def seconds_per_pair(product, matrices: int, rounds: int, executor: ThreadPoolExecutor) -> float:
    row = torch.randn(1, IN_FEATURES)

    def run(offset: int) -> None:
        torch.set_num_threads(1)
        with torch.inference_mode():
            for _ in range(rounds):
                for index in range(matrices):
                    product(offset + index, row)

    run(0)  # warm-up: oneDNN builds its kernels at the first call
    start = time.perf_counter()
    other = executor.submit(run, matrices)
    run(0)
    other.result()
    return (time.perf_counter() - start) / (rounds * matrices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--matrices", type=int, default=8, help="weights per thread")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}")
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(OUT_FEATURES, IN_FEATURES, generator=generator) for _ in range(2 * args.matrices)]
    print(f"torch.sum over 512 MB, 2 threads: {bandwidth_gb_per_s(threads=2):.1f} GB/s")
    print(f"{'weight format':36s} {'ms per pair':>12s} {'GB/s read':>10s}")
    with ThreadPoolExecutor(max_workers=1) as executor:
        for label, (value_bytes, product) in formats(weights).items():
            seconds = seconds_per_pair(product, args.matrices, args.rounds, executor)
            gigabytes = 2 * OUT_FEATURES * IN_FEATURES * value_bytes / 1e9
            print(f"{label:36s} {seconds * 1e3:12.3f} {gigabytes / seconds:10.1f}")


if __name__ == "__main__":
    main()
