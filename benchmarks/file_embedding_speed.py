"""
`allennlp elmo`'s engine against a 0.9-style loop over AllenNLP's own biLM, same weights, same
file, one run; and the peak memory of ours on a small and a large input.

    python benchmarks/file_embedding_speed.py [--sentences 1000] [--large 50000] [--threads 2] [--architecture original]

Weights: random, in the published layout, of the published "small" architecture
(2x1024_128_2048cnn_1xhighway) or, with `--architecture original`, the original one
(2x4096_512_2048cnn_2xhighway). Sentences: WikiText-2 validation + test lines of 3-60 tokens
(../shared/data/lm_eval), repeated to the requested count. Each measurement runs in a fresh
subprocess so that its peak RSS (ru_maxrss) is its own.

- ours: `ElmoEmbedder.embed_file` (what `allennlp elmo --deterministic` runs): deterministic start state,
  length-sorted chunks, `--all`.
- 0.9-style: what AllenNLP 0.9's `allennlp elmo` did: read every line, batches of 64 in file
  order with carried state through AllenNLP's `_ElmoBiLm`, one dataset per line.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Tuple

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))

from elmo_plugin.weights.pretrained import ARCHITECTURE_OPTIONS  # noqa: E402
from tests.random_weights import write_random_elmo  # noqa: E402


def random_model(directory: Path, architecture: str) -> Tuple[str, str]:
    """Options and weight files of a published architecture (`small` or `original`) with random
    weights, under `directory / architecture`."""
    return write_random_elmo(directory / architecture, ARCHITECTURE_OPTIONS[architecture], seed=0)


def make_input(path: Path, count: int, names=("wikitext2.valid.txt", "wikitext2.test.txt")) -> int:
    """`count` lines of 3-60 tokens from the WikiText-2 files `names`, repeated as needed, into
    `path`; returns their tokens."""
    lines = []
    for name in names:
        for line in (SHARED / "data" / "lm_eval" / name).read_text(encoding="utf-8").splitlines():
            tokens = line.split()
            if 3 <= len(tokens) <= 60 and not line.lstrip().startswith("="):
                lines.append(" ".join(tokens))
    chosen = [lines[i % len(lines)] for i in range(count)]
    path.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    return sum(len(line.split()) for line in chosen)


OURS = """
import sys, time, resource, json, torch
torch.set_num_threads(int(sys.argv[5]))
from elmo_plugin import ElmoEmbedder
embedder = ElmoEmbedder(sys.argv[1], sys.argv[2])
start = time.perf_counter()
embedder.embed_file(sys.argv[3], sys.argv[4], batch_size=64)
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

ALLENNLP_09_STYLE = """
import sys, time, resource, json, torch, h5py
torch.set_num_threads(int(sys.argv[5]))
from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids
from allennlp.nn.util import remove_sentence_boundaries
bilm = _ElmoBiLm(sys.argv[1], sys.argv[2]).eval()
start = time.perf_counter()
sentences = [line.strip() for line in open(sys.argv[3], encoding="utf-8")]
with h5py.File(sys.argv[4], "w") as out, torch.no_grad():
    for first in range(0, len(sentences), 64):
        batch = [s.split() for s in sentences[first:first + 64]]
        output = bilm(batch_to_ids(batch))
        layers = [remove_sentence_boundaries(a, output["mask"]) for a in output["activations"]]
        activations = torch.stack([l for l, _ in layers], dim=1)
        lengths = layers[0][1].sum(dim=1).tolist()
        for row, length in enumerate(lengths):
            out.create_dataset(str(first + row), data=activations[row, :, :length].numpy())
    out.create_dataset("sentence_to_index", data=json.dumps({s: str(i) for i, s in enumerate(sentences)}))
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(script: str, options: str, weights: str, input_path: Path, output: Path, threads: int) -> dict:
    if output.exists():
        output.unlink()
    completed = subprocess.run(
        [sys.executable, "-c", script, options, weights, str(input_path), str(output), str(threads)],
        capture_output=True, text=True, cwd=REPO,
    )
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr[-3000:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--large", type=int, default=50000, help="0 skips the memory run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--architecture", choices=sorted(ARCHITECTURE_OPTIONS), default="small")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        options, weights = random_model(work_dir, args.architecture)
        small_input = work_dir / "small.txt"
        tokens = make_input(small_input, args.sentences)
        print(f"{args.architecture} architecture, random weights, {args.threads} threads; "
              f"{args.sentences} sentences, {tokens} tokens")
        ours = run(OURS, options, weights, small_input, work_dir / "ours.hdf5", args.threads)
        theirs = run(ALLENNLP_09_STYLE, options, weights, small_input, work_dir / "theirs.hdf5", args.threads)
        for name, result in (("ours (allennlp elmo)", ours), ("0.9-style AllenNLP loop", theirs)):
            print(f"{name:<26} {args.sentences / result['seconds']:8.1f} sentences/s "
                  f"{tokens / result['seconds']:8.0f} tokens/s  peak RSS {result['peak_rss_mb']:7.0f} MB")
        print(f"speed-up: {theirs['seconds'] / ours['seconds']:.2f}x")
        if args.large:
            large_input = work_dir / "large.txt"
            large_tokens = make_input(large_input, args.large)
            large = run(OURS, options, weights, large_input, work_dir / "large.hdf5", args.threads)
            print(f"ours on {args.large} sentences ({large_tokens} tokens): "
                  f"{args.large / large['seconds']:.1f} sentences/s, peak RSS {large['peak_rss_mb']:.0f} MB "
                  f"(vs {ours['peak_rss_mb']:.0f} MB on {args.sentences})")


if __name__ == "__main__":
    main()
