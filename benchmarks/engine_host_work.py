"""
The file engine's own work per line (reading, batching, character ids, HDF5 chunks and the
merge), made visible with a biLM so small that its compute is a minor share: the
TensorFlow-trained fixture biLM of ../shared/fixtures/elmo. On a GPU the engine's host work
is what sets the pace of `allennlp elmo` (BENCHMARKS.md, "On a GPU"); this measures it on the
CPU, where it can be compared between commits (`compare_commits.sh`).

    python benchmarks/engine_host_work.py [--lines 50000] [--threads 2] [--formats all mean] [--profile]

Lines: WikiText-2 validation + test lines of 3-60 tokens, repeated to `--lines`.
Deterministic mode, the default token budget; `all` writes every layer, `mean` one mean vector
per line. `--profile`: a cProfile of one run per format instead (sorted by own time).
"""
import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from elmo_plugin import ElmoEmbedder  # noqa: E402
from file_embedding_speed import make_input  # noqa: E402
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE  # noqa: E402

FORMATS = {"all": {"output_format": "all"}, "top": {"output_format": "top"}, "mean": {"sentence_vectors": "mean"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=["all", "mean"])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        text = Path(work) / "lines.txt"
        tokens = make_input(text, args.lines)
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
        print(f"fixture biLM, {args.threads} threads; {args.lines} lines, {tokens} tokens; deterministic")
        for name in args.formats:
            output = Path(work) / f"{name}.hdf5"
            start = time.perf_counter()
            if args.profile:
                profiler = cProfile.Profile()
                profiler.runcall(embedder.embed_file, str(text), str(output), **FORMATS[name])
                pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
            else:
                embedder.embed_file(str(text), str(output), **FORMATS[name])
            seconds = time.perf_counter() - start
            print(f"{name:>5}: {seconds:6.1f} s, {tokens / seconds:8.0f} tokens/s, "
                  f"{1e6 * seconds / args.lines:6.1f} us per line", flush=True)
            output.unlink()


if __name__ == "__main__":
    main()
