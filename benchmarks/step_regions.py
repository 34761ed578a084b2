"""
Where a biLM training step's time goes, without the profiler: wall-clock time of each of our
autograd functions' forward and backward passes (the char CNN, the LSTM's steps, the linear
layers, the sampled softmax) and of the products inside them, each exclusive of the parts
nested in it. torch's profiler makes the large elementwise operations look several times
slower than they run (BENCHMARKS.md), so it misplaces the bottleneck; these are plain
`time.perf_counter` readings around the calls.

    python benchmarks/step_regions.py --streams 128 --precision bfloat16 --threads 2 [--products-by-shape 20]

The step is `train_bilm.py`'s (Brown, the small architecture by default); "(products)" is every
`recorded_products` kernel call, wherever it is made. `--products-by-shape N` also lists the N
costliest product shapes `(m, k, n)` with their kernel, operand dtype and layout (`a^T`, `b^T`:
a transposed view read as it is) and the rate they ran at.
"""
import argparse
import collections
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bilm  # noqa: E402

from elmo_plugin.kernels import recorded_products  # noqa: E402
from elmo_plugin.kernels.recorded_products import TRAINING_PRECISIONS  # noqa: E402
from elmo_plugin.models import sampled_softmax  # noqa: E402
from elmo_plugin.modules import char_encoder, recorded_recurrence  # noqa: E402
from elmo_plugin.weights.pretrained import ARCHITECTURE_OPTIONS  # noqa: E402

PRODUCTS = "(products)"


class ProductShapes:
    """Seconds, calls and floating-point operations per product shape, kernel, dtype and layout."""

    def __init__(self) -> None:
        self.totals: Dict[tuple, List[float]] = collections.defaultdict(lambda: [0.0, 0, 0.0])

    def timed(self, times: "ExclusiveTimes", function: Callable) -> Callable:
        def wrapper(kernel, a, b, bias):
            if not times.recording:
                return function(kernel, a, b, bias)
            start = time.perf_counter()
            result = function(kernel, a, b, bias)
            (m, k), n = a.shape, b.shape[0]
            layout = " ".join(name for name, operand, rows in (("a^T", a, m), ("b^T", b, n)) if rows > 1 and operand.stride(0) == 1)
            totals = self.totals[(m, k, n, kernel, str(a.dtype).replace("torch.", ""), layout)]
            totals[0] += time.perf_counter() - start
            totals[1] += 1
            totals[2] += 2.0 * m * k * n
            return result

        return wrapper

    def print(self, steps: int, count: int) -> None:
        print("costliest product shapes (per step; m x k times k x n):")
        for key, (seconds, calls, flop) in sorted(self.totals.items(), key=lambda item: -item[1][0])[:count]:
            m, k, n, kernel, dtype, layout = key
            print(f"  {seconds / steps * 1e3:7.1f} ms  {calls / steps:5.0f} calls  {flop / seconds / 1e9:6.0f} GFLOP/s  "
                  f"({m}, {k}, {n}) {kernel} {dtype} {layout}")


class ExclusiveTimes:
    """Seconds and calls per label; a call's time excludes the labelled calls nested in it."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = collections.defaultdict(float)
        self.calls: Dict[str, int] = collections.defaultdict(int)
        self.recording = False
        self._nested: List[float] = []

    def timed(self, label: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            if not self.recording:
                return function(*args, **kwargs)
            self._nested.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = self._nested.pop()
                if self._nested:
                    self._nested[-1] += elapsed
                self.seconds[label] += elapsed - nested
                self.calls[label] += 1

        return wrapper


def instrument(times: ExclusiveTimes, shapes: ProductShapes, model) -> None:
    functions = {
        "char CNN": char_encoder.ConvolveAndMaxPool,
        "LSTM steps": recorded_recurrence.RecordedRecurrence,
        "linear layers": recorded_products.LinearWithGradients,
        "sampled softmax": sampled_softmax._SampledSoftmaxNll,
    }
    for name, function in functions.items():
        for method in ("forward", "backward"):
            setattr(function, method, staticmethod(times.timed(f"{name} {method}", getattr(function, method))))
    recorded_products._product = times.timed(PRODUCTS, shapes.timed(times, recorded_products._product))
    # What the forward pass does outside those functions, by part
    parts = dict(train_bilm.forward_parts(model), model=(model, "forward"))
    for name, (module, method) in parts.items():
        setattr(module, method, times.timed(f"forward, rest: {name}", getattr(module, method)))
    backward = torch.Tensor.backward
    torch.Tensor.backward = lambda tensor, *args, **kwargs: times.timed("backward, rest: autograd", backward)(
        tensor, *args, **kwargs
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="steps measured")
    parser.add_argument("--warmup", type=int, default=6, help="steps before (one-off allocations, kernel choice)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="float32", choices=TRAINING_PRECISIONS)
    parser.add_argument("--architecture", default="small", choices=sorted(ARCHITECTURE_OPTIONS))
    parser.add_argument("--products-by-shape", type=int, default=0, metavar="N",
                        help="also the N costliest product shapes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    times, shapes = ExclusiveTimes(), ProductShapes()
    with tempfile.TemporaryDirectory() as directory:
        model, _, steps, _, _ = train_bilm.brown_training(
            directory, args.streams, precision=args.precision, architecture=args.architecture,
            max_steps=args.warmup + args.steps,
        )
        instrument(times, shapes, model)
        for _ in range(args.warmup):
            next(steps)
        times.recording = True
        measured = list(steps)
    step_seconds = sum(step["seconds"] for step in measured) / len(measured)
    print(f"{args.architecture} architecture, {args.precision}, {args.streams} streams, {args.threads} threads: "
          f"{step_seconds * 1e3:.0f} ms/step over {len(measured)} steps after {args.warmup}")
    print("exclusive times per step:")
    for label, seconds in sorted(times.seconds.items(), key=lambda item: -item[1]):
        print(f"  {seconds / len(measured) * 1e3:7.1f} ms  {times.calls[label] / len(measured):5.0f} calls  {label}")
    accounted = sum(times.seconds.values()) / len(measured)
    print(f"  {(step_seconds - accounted) * 1e3:7.1f} ms  the rest (zero_grad, clipping, optimizer)")
    if args.products_by_shape:
        shapes.print(len(measured), args.products_by_shape)


if __name__ == "__main__":
    main()
