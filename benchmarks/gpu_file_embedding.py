"""
`allennlp elmo`'s engine on a GPU: tokens/s and peak GPU memory over a large file, with the
LSTM's CUDA graphs on and off (at the first budget) and at several token budgets, in one
process.

    python benchmarks/gpu_file_embedding.py [--lines 50000] [--budgets 4096 8192 16384 32768]

Weights: random, in the published layout, of the original architecture
(2x4096_512_2048cnn_2xhighway). Lines: WikiText-2 validation lines of 3-60 tokens
(../shared/data/lm_eval), repeated to `--lines`. Every run is `ElmoEmbedder.embed_file` (the
code `allennlp elmo --cuda-device 0 --deterministic` runs: length-sorted batches filled to the
token budget) writing one mean vector per line (`--sentence-vectors mean`), so that the
figures are the biLM's and the engine's rather than the disk's (all layers of 50,000 lines are
about 15 GB). Float32 with TF32 off. The first run of the process is a warm-up of 2,000 lines.
"""
import argparse
import sys
import tempfile
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


def run(embedder: ElmoEmbedder, input_path: Path, output: Path) -> float:
    if output.exists():
        output.unlink()
    torch.cuda.synchronize()
    start = time.perf_counter()
    embedder.embed_file(str(input_path), str(output), sentence_vectors="mean")
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--budgets", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
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
        print(f"{'token budget':>12} {'cuda graphs':>11} {'tokens/s':>10} {'seconds':>8} {'peak GPU MB':>12} {'graphs':>7}")
        first = True
        for budget in args.budgets:
            # Without graphs at the first budget only: the comparison; the budgets with them.
            for graphs in (False, True) if budget == args.budgets[0] else (True,):
                embedder = ElmoEmbedder(options, weights, cuda_device=0, stateful=False, max_tokens_per_batch=budget)
                embedder.elmo_bilm.lstm.cuda_graphs = graphs
                if first:
                    run(embedder, warm_up, work_dir / "warm_up.hdf5")
                    first = False
                torch.cuda.reset_peak_memory_stats()
                seconds = run(embedder, text, work_dir / "out.hdf5")
                peak = torch.cuda.max_memory_allocated() / 2**20
                captured = len(embedder.elmo_bilm.lstm.fixed_shapes.graphs)
                print(f"{budget:>12} {'on' if graphs else 'off':>11} {tokens / seconds:>10.0f} {seconds:>8.1f} "
                      f"{peak:>12.0f} {captured:>7}", flush=True)
                del embedder
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
