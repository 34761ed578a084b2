"""
What `allennlp elmo --dtype` and `--compression` do to the output file and the run: file size and
embedding time for float32/float16 x none/lzf/gzip on WikiText-2 lines, and float16's error
against float32 (largest absolute difference, and per layer the mean over tokens of the cosine
between a token's float16 and float32 vectors).

    python benchmarks/output_size.py [--lines 50000] [--threads 2] [--architecture small]

Small architecture with random weights in the published layout, deterministic mode, `--all`;
each run in a fresh process (`python -m elmo_plugin elmo`), one after the other. Prints one row
per run as it finishes.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from file_embedding_speed import make_input, random_model  # noqa: E402

RUNS = [("float32", None), ("float32", "lzf"), ("float32", "gzip"),
        ("float16", None), ("float16", "lzf"), ("float16", "gzip")]


def embed(directory: Path, options_file: str, weight_file: str, dtype: str, compression, threads: int) -> Path:
    output = directory / f"{dtype}-{compression or 'none'}.hdf5"
    command = [sys.executable, "-m", "elmo_plugin", "elmo", str(directory / "input.txt"), str(output), "--all",
               "--deterministic", "--options-file", options_file, "--weight-file", weight_file, "--dtype", dtype]
    if compression:
        command += ["--compression", compression]
    environment = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return output


def float16_error(float32_path: Path, float16_path: Path) -> str:
    largest, cosines = 0.0, None
    with h5py.File(float32_path, "r") as exact, h5py.File(float16_path, "r") as half:
        sums, count = None, 0
        for key in exact:
            if key == "sentence_to_index":
                continue
            a, b = exact[key][...].astype(numpy.float64), half[key][...].astype(numpy.float64)
            largest = max(largest, float(numpy.abs(a - b).max()))
            cos = (a * b).sum(-1) / (numpy.linalg.norm(a, axis=-1) * numpy.linalg.norm(b, axis=-1))
            sums = cos.sum(axis=1) if sums is None else sums + cos.sum(axis=1)
            count += a.shape[1]
        cosines = sums / count
    return f"max |diff| {largest:.2e}, mean cosine per layer {', '.join(f'{c:.7f}' for c in cosines)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--architecture", default="small")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        tokens = make_input(directory / "input.txt", args.lines)
        options_file, weight_file = random_model(directory, args.architecture)
        print(f"{args.lines} lines, {tokens} tokens, {args.architecture} architecture, {args.threads} threads", flush=True)
        print("| dtype | compression | file size | embedding time | sentences/s |", flush=True)
        print("|---|---|---|---|---|", flush=True)
        outputs = {}
        for dtype, compression in RUNS:
            start = time.monotonic()
            outputs[dtype, compression] = embed(directory, options_file, weight_file, dtype, compression, args.threads)
            seconds = time.monotonic() - start
            size = outputs[dtype, compression].stat().st_size
            print(f"| {dtype} | {compression or 'none'} | {size / 2**20:,.0f} MiB | {seconds:.0f} s | "
                  f"{args.lines / seconds:.1f} |", flush=True)
            if (dtype, compression) != ("float32", None) and dtype == "float32":
                outputs[dtype, compression].unlink()  # keep the disk for the float16 runs
        print("float16 against float32:", float16_error(outputs["float32", None], outputs["float16", None]), flush=True)


if __name__ == "__main__":
    main()
