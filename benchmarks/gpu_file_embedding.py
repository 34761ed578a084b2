"""
`allennlp elmo`'s engine on a GPU: tokens/s and peak GPU memory over a large file at several
token budgets (one process), with several worker processes sharing the GPU (at the first
budget), and optionally with the LSTM's CUDA graphs off (at the first budget).

    python benchmarks/gpu_file_embedding.py [--lines 50000] [--budgets 8192 32768] [--workers 2 4]
        [--compare-graphs]

Weights: random, in the published layout, of the original architecture
(2x4096_512_2048cnn_2xhighway). Lines: WikiText-2 validation lines of 3-60 tokens
(../shared/data/lm_eval), repeated to `--lines`. Every run is `ElmoEmbedder.embed_file` (the
code `allennlp elmo --cuda-device 0 --deterministic [--num-workers N]` runs: length-sorted
batches filled to the token budget) writing one mean vector per line (`--sentence-vectors
mean`), so that the figures are the biLM's and the engine's rather than the disk's (all layers
of 50,000 lines are about 15 GB). Float32 with TF32 off. The first run of the process is a
warm-up of 2,000 lines; a run with workers includes their start (each imports the stack and
loads its copy of the biLM onto the GPU), as a user's does.

Peak memory: "allocated" is this process's allocator (one-process runs); "GPU used" is the
whole GPU's, every process and its CUDA context included, sampled every 50 ms.
"""
import argparse
import cProfile
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from elmo_plugin import ElmoEmbedder  # noqa: E402
from file_embedding_speed import make_input  # noqa: E402
from elmo_plugin.weights.pretrained import ORIGINAL_OPTIONS  # noqa: E402
from tests.random_weights import write_random_elmo  # noqa: E402

# The GPU machine gets only the validation text (`gpu_environment.sh`).
VALIDATION = ("wikitext2.valid.txt",)


class GpuMemorySampler:
    """The most memory in use on the GPU (every process) while it runs, sampled."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.05)

    def __enter__(self) -> "GpuMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run(embedder: ElmoEmbedder, input_path: Path, output: Path, num_workers: int = 1) -> float:
    if output.exists():
        output.unlink()
    torch.cuda.synchronize()
    start = time.perf_counter()
    embedder.embed_file(str(input_path), str(output), sentence_vectors="mean", num_workers=num_workers)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--budgets", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--workers", type=int, nargs="*", default=[], help="worker processes, at the first budget")
    parser.add_argument("--compare-graphs", action="store_true", help="also without CUDA graphs, at the first budget")
    parser.add_argument("--profile", action="store_true",
                        help="instead: cProfile of one run at the first budget (where the host's time goes)")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        options, weights = write_random_elmo(work_dir / "original", ORIGINAL_OPTIONS, seed=0)
        text, warm_up = work_dir / "lines.txt", work_dir / "warm_up.txt"
        tokens = make_input(text, args.lines, VALIDATION)
        make_input(warm_up, 2000, VALIDATION)
        print(f"original architecture, random weights, float32, {torch.cuda.get_device_name()}; "
              f"{args.lines} lines, {tokens} tokens; deterministic, one mean vector per line")
        print(f"{'token budget':>12} {'workers':>7} {'cuda graphs':>11} {'tokens/s':>10} {'seconds':>8} "
              f"{'allocated MB':>12} {'GPU used MB':>11} {'graphs':>7}")
        if args.profile:
            embedder = ElmoEmbedder(options, weights, cuda_device=0, stateful=False, max_tokens_per_batch=args.budgets[0])
            run(embedder, warm_up, work_dir / "warm_up.hdf5")
            profiler = cProfile.Profile()
            seconds = profiler.runcall(run, embedder, text, work_dir / "out.hdf5")
            print(f"{tokens / seconds:.0f} tokens/s under the profiler")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
            return
        runs = [(budget, 1, True) for budget in args.budgets]
        runs[1:1] = [(args.budgets[0], workers, True) for workers in args.workers if workers > 1]
        if args.compare_graphs:
            runs.insert(1, (args.budgets[0], 1, False))
        first = True
        for budget, workers, graphs in runs:
            embedder = ElmoEmbedder(options, weights, cuda_device=0, stateful=False, max_tokens_per_batch=budget)
            embedder.elmo_bilm.lstm.cuda_graphs = graphs
            if first:
                run(embedder, warm_up, work_dir / "warm_up.hdf5")
                first = False
            torch.cuda.reset_peak_memory_stats()
            with GpuMemorySampler() as sampler:
                seconds = run(embedder, text, work_dir / "out.hdf5", workers)
            allocated = f"{torch.cuda.max_memory_allocated() / 2**20:.0f}" if workers == 1 else "-"
            captured = len(embedder.elmo_bilm.lstm.fixed_shapes.graphs) if workers == 1 else "-"
            print(f"{budget:>12} {workers:>7} {'on' if graphs else 'off':>11} {tokens / seconds:>10.0f} "
                  f"{seconds:>8.1f} {allocated:>12} {sampler.peak / 2**20:>11.0f} {captured:>7}", flush=True)
            del embedder
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
