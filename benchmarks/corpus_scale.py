"""
`allennlp elmo` at corpus scale: long sentences in bounded memory, the token budget of a batch,
and worker processes. Every measurement is a fresh subprocess, so that its peak RSS
(ru_maxrss) is its own; "after load" is the RSS once the biLM is read, before any embedding.

    python benchmarks/corpus_scale.py long [--lengths 1000 10000 30000 60000] [--architecture small]
    python benchmarks/corpus_scale.py budget [--sentences 4000]
    python benchmarks/corpus_scale.py workers [--sentences 4000] [--chunk-size 500]

Weights: random, in the published layout, of the published "small" architecture
(2x1024_128_2048cnn_1xhighway) or the original one (2x4096_512_2048cnn_2xhighway). Text:
WikiText-2 validation + test lines of 3-60 tokens (../shared/data/lm_eval); a long sentence is
its words run together (repeated where it needs more). Threads: `--threads` (default 2) per process, split among workers.

- long: one sentence of each length, `allennlp elmo --all` on it, with the default token budget
  (read in segments) and with an unbounded one (read whole, as before this budget existed).
- budget: deterministic batches up to each budget (`--max-tokens-per-batch`), against the
  former batches of 64 sentences.
- workers: the same file with 1 and 2 worker processes.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from elmo_plugin.weights.pretrained import ARCHITECTURE_OPTIONS

from file_embedding_speed import make_input, random_model  # WikiText-2 lines of 3-60 tokens
from embed_speed import cpu_description

REPO = Path(__file__).resolve().parent.parent

RUN = """
import json, resource, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
from elmo_plugin import ElmoEmbedder
settings = json.loads(sys.argv[2])
embedder = ElmoEmbedder(settings["options"], settings["weights"], max_tokens_per_batch=settings["budget"])
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
embedder.embed_file(settings["input"], settings["output"], batch_size=settings["batch_size"],
                    num_workers=settings["workers"], chunk_size=settings.get("chunk_size", 4096), overwrite=True)
print(json.dumps({"seconds": time.perf_counter() - start, "loaded_mb": loaded,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def measure(threads: int, **settings) -> dict:
    completed = subprocess.run([sys.executable, "-c", RUN, str(threads), json.dumps(settings)],
                               cwd=REPO, capture_output=True, text=True)
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def long_sentences(args, directory: Path) -> None:
    options, weights = random_model(directory, args.architecture)
    make_input(directory / "corpus.txt", 4000)
    words = (directory / "corpus.txt").read_text(encoding="utf-8").split()
    print("| tokens | reading | seconds | tokens/s | RSS after load (MB) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for length in args.lengths:
        path = directory / f"long_{length}.txt"
        repeated = words * (length // len(words) + 1)  # the corpus has fewer words than the longest
        path.write_text(" ".join(repeated[:length]) + "\n", encoding="utf-8")
        for name, budget in (("segments (default budget)", None), ("whole", 10**9)):
            from elmo_plugin.inference.elmo_embedder import DEFAULT_MAX_TOKENS_PER_BATCH

            result = measure(args.threads, options=options, weights=weights, input=str(path),
                             output=str(directory / "out.hdf5"), batch_size=None, workers=1,
                             budget=budget or DEFAULT_MAX_TOKENS_PER_BATCH)
            if "error" in result:
                print(f"| {length} | {name} | {result['error']} |  |  |  |", flush=True)
                continue
            print(f"| {length} | {name} | {result['seconds']:.1f} | {length / result['seconds']:.0f} | "
                  f"{result['loaded_mb']:.0f} | {result['peak_mb']:.0f} |", flush=True)


def budgets(args, directory: Path) -> None:
    options, weights = random_model(directory, args.architecture)
    path = directory / "corpus.txt"
    tokens = make_input(path, args.sentences)
    print(f"{args.sentences} sentences, {tokens} tokens")
    print("| batches | seconds | tokens/s | peak RSS (MB) |")
    print("|---|---|---|---|")
    runs = [("64 sentences, 3200 tokens (before)", 64, 3200)]
    runs += [(f"{budget} tokens", None, budget) for budget in args.budgets]
    for name, batch_size, budget in runs:
        result = measure(args.threads, options=options, weights=weights, input=str(path),
                         output=str(directory / "out.hdf5"), batch_size=batch_size, workers=1, budget=budget)
        print(f"| {name} | {result['seconds']:.1f} | {tokens / result['seconds']:.0f} | {result['peak_mb']:.0f} |",
              flush=True)


def workers(args, directory: Path) -> None:
    from elmo_plugin.inference.elmo_embedder import DEFAULT_MAX_TOKENS_PER_BATCH

    options, weights = random_model(directory, args.architecture)
    path = directory / "corpus.txt"
    tokens = make_input(path, args.sentences)
    print(f"{args.sentences} sentences, {tokens} tokens; {args.threads} threads in all; "
          f"chunks of {args.chunk_size} lines")
    print("| processes | seconds (with start-up) | tokens/s | speed-up |")
    print("|---|---|---|---|")
    first = None
    for count in (1, 2):
        result = measure(args.threads, options=options, weights=weights, input=str(path),
                         output=str(directory / "out.hdf5"), batch_size=None, workers=count,
                         budget=DEFAULT_MAX_TOKENS_PER_BATCH, chunk_size=args.chunk_size)
        first = first or result["seconds"]
        print(f"| {count} | {result['seconds']:.1f} | {tokens / result['seconds']:.0f} | "
              f"{first / result['seconds']:.2f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("long", "budget", "workers"))
    parser.add_argument("--architecture", choices=sorted(ARCHITECTURE_OPTIONS), default="small")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 10000, 30000, 60000])
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk-size", type=int, default=500, help="workers: lines per chunk, the unit shared out")
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; torch threads {args.threads}; architecture {args.architecture}")
    with tempfile.TemporaryDirectory() as directory:
        {"long": long_sentences, "budget": budgets, "workers": workers}[args.part](args, Path(directory))


if __name__ == "__main__":
    main()
