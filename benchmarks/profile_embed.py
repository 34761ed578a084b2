"""
Where the time of one embedding batch goes: `torch.profiler` over our `ElmoBiLm` and
AllenNLP's `_ElmoBiLm` on the same random weights of the original architecture.

    python benchmarks/profile_embed.py [--device cuda] [--batch-size 64] [--rows 12]
        [--precision bfloat16] [--serial-directions] [--without-cuda-graphs]

Printed per implementation: milliseconds per batch (median of 5, timed before any profiling),
the number of operator calls and, on a GPU, of kernel launches, the share of the wall time the
GPU spends in kernels (far below 100% means the host cannot launch work fast enough: the GPU waits on
Python and the dispatcher), and the operators with the most self time (device time on a GPU,
CPU time otherwise). On the CPU, ours runs its backward direction in a worker thread
(`ElmoLstm.parallel_directions`) that the profiler does not follow: its table shows the forward
direction's operators only, unless `--serial-directions` runs both in one thread.
"""
import sys
import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from embed_speed import SHARED, sentences, synchronize  # the same sentences as the speed benchmark
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

# The repository root, for the tests' random-weight helper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import elmo_plugin  # noqa: F401
from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.weights.pretrained import ORIGINAL_OPTIONS
from tests.random_weights import write_random_elmo  # noqa: E402


def timed(model, ids, device) -> float:
    synchronize(device)
    start = time.perf_counter()
    model(ids)
    synchronize(device)
    return time.perf_counter() - start


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="float32", help="ours: float32, bfloat16 or int8")
    parser.add_argument("--serial-directions", action="store_true",
                        help="ours: both directions in the calling thread, so that the profile shows both")
    parser.add_argument("--without-cuda-graphs", action="store_true",
                        help="ours: every LSTM step launched from Python (ElmoLstm.cuda_graphs off)")
    parser.add_argument("--sentences-file", type=Path,
                        default=SHARED / "data" / "lm_eval" / "wikitext2.valid.txt")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    from allennlp.modules.elmo import _ElmoBiLm

    with tempfile.TemporaryDirectory() as work:
        options_file, weight_file = write_random_elmo(work, ORIGINAL_OPTIONS, seed=0)
        models = {
            "allennlp": _ElmoBiLm(options_file, weight_file).eval().to(device),
            "ours": ElmoBiLm(options_file, weight_file, precision=args.precision).eval().to(device),
        }
    models["ours"]._elmo_lstm.parallel_directions = not args.serial_directions
    models["ours"]._elmo_lstm.cuda_graphs = not args.without_cuda_graphs
    data = sentences(args.batch_size, args.sentences_file)
    ids = batch_to_ids(data).to(device)
    tokens = sum(len(sentence) for sentence in data)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort_key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    # Timed before any profiling: once the profiler has run, CUDA kernel launches can stay
    # slower for the rest of the process (its activity callbacks), which would favour the first.
    milliseconds_per_batch = {}
    for name, model in models.items():
        for _ in range(2):  # warm-up: allocator, cuBLAS handles, MKL packing
            model(ids)
        milliseconds_per_batch[name] = 1e3 * statistics.median(timed(model, ids, device) for _ in range(5))
    for name, model in models.items():
        milliseconds = milliseconds_per_batch[name]
        with profile(activities=activities) as profiler:
            model(ids)
            synchronize(device)
        events = profiler.events()
        operators = sum(1 for event in events if event.device_type == DeviceType.CPU
                        and event.name.startswith("aten::") and event.cpu_parent is None)
        kernels = [event for event in events if event.device_type == DeviceType.CUDA]
        print(f"\n== {name}: batch {args.batch_size} ({tokens} tokens), {milliseconds:.1f} ms per batch, "
              f"{tokens / milliseconds * 1e3:.0f} tokens/s, {operators} top-level operator calls")
        if kernels:
            busy = sum(event.time_range.elapsed_us() for event in kernels) / 1e3
            print(f"   {len(kernels)} kernel launches; GPU in kernels {busy:.1f} ms "
                  f"= {100 * busy / milliseconds:.0f}% of the wall time")
        print(profiler.key_averages().table(sort_by=sort_key, row_limit=args.rows))


if __name__ == "__main__":
    main()
