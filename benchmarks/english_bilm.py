"""
A biLM trained the way a user would, with `allennlp train`, on the ~3M tokens of English in
../shared/data (Brown, MASC, ABC, webtext, State of the Union), then its full-softmax perplexity
and OOV rate on WikiText-2, PTB and held-out Brown.

    python benchmarks/english_bilm.py prepare /tmp/english          # corpus/ and the command
    allennlp train training_config/bilm/small.jsonnet -s /tmp/english/run -o '{...}'  # printed
    python benchmarks/english_bilm.py evaluate /tmp/english         # the figures
    python benchmarks/english_bilm.py reading /tmp/english          # one pass of the loader
    # --run NAME: a run directory other than /tmp/english/run (e.g. a second run beside it)

`reading`: one pass of the training loader over the corpus (vocabulary from the run), read
lazily as the configs do and all at once (`max_instances_in_memory` null), each in a fresh
process: seconds, and the peak memory above the process's before reading.

`prepare` writes one tokenized sentence per line: Brown's and MASC's own tokens (tags
stripped); the raw text of the other three cut into sentences at ., ! and ? before a capital
and tokenized by a simple regular expression (words with inner hyphens and apostrophes kept
together, every other mark on its own). The same 500 held-out Brown sentences as
`train_bilm.py brown`; the rest shuffled into 10 shards. Vocabulary: words seen 3+ times in
the training shards (the config's `{"type": "bilm", "min_count": 3}`). The training run
checkpoints every 5 minutes, so an interrupted one continues with `--recover`.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import zipfile
from typing import List

import torch
from allennlp.models.archival import load_archive

from train_bilm import (
    SHARED_DATA,
    TRAINING_PRECISIONS,
    WINDOW_SIZE,
    brown_sentences,
    print_test_perplexities,
    write_lines,
)

RAW_CORPORA = ("abc.zip", "webtext.zip", "state_union.zip")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(]?[A-Z])")
TOKEN = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")
HELDOUT_BROWN = 500
SHARDS = 10
STREAMS = 128  # the training configs' num_streams


def raw_sentences(zip_name: str) -> List[str]:
    sentences = []
    with zipfile.ZipFile(os.path.join(SHARED_DATA, zip_name)) as archive:
        for name in sorted(archive.namelist()):
            if not name.endswith(".txt"):
                continue
            text = archive.read(name).decode("utf-8", errors="replace")
            for line in text.splitlines():
                for sentence in SENTENCE_END.split(line.strip()):
                    tokens = TOKEN.findall(sentence)
                    if tokens:
                        sentences.append(" ".join(tokens))
    return sentences


def masc_sentences() -> List[str]:
    """MASC's lines of `word_TAG` tokens -> words."""
    sentences = []
    with zipfile.ZipFile(os.path.join(SHARED_DATA, "masc_tagged.zip")) as archive:
        for name in sorted(archive.namelist()):
            if not name.endswith(".txt") or name.endswith("categories.txt"):
                continue
            for line in archive.read(name).decode("utf-8", errors="replace").splitlines():
                words = [token.rsplit("_", 1)[0] for token in line.split()]
                if words:
                    sentences.append(" ".join(words))
    return sentences


def prepare(args) -> None:
    corpus = os.path.join(args.directory, "corpus")
    os.makedirs(os.path.join(corpus, "train"), exist_ok=True)
    brown = brown_sentences()
    random.Random(0).shuffle(brown)  # the held-out sentences of train_bilm.py's `brown` part
    write_lines(corpus, "brown_heldout.txt", brown[:HELDOUT_BROWN])
    sources = {"brown": brown[HELDOUT_BROWN:], "masc": masc_sentences()}
    for zip_name in RAW_CORPORA:
        sources[zip_name[: -len(".zip")]] = raw_sentences(zip_name)
    training = [sentence for sentences in sources.values() for sentence in sentences]
    random.Random(1).shuffle(training)
    for shard in range(SHARDS):
        write_lines(os.path.join(corpus, "train"), f"shard{shard:02d}.txt", training[shard::SHARDS])
    for name, sentences in sources.items():
        print(f"{name}: {len(sentences)} sentences, {sum(len(s.split()) for s in sentences)} tokens")
    print(f"training: {len(training)} sentences, {sum(len(s.split()) for s in training)} tokens "
          f"in {SHARDS} shards; held-out Brown: {HELDOUT_BROWN} sentences")
    overrides = {
        "train_data_path": os.path.join(corpus, "train", "*.txt"),
        "validation_data_path": os.path.join(corpus, "brown_heldout.txt"),
        "vocabulary": {"type": "bilm", "min_count": 3},
        "model.training_precision": args.precision,
        "trainer.num_epochs": args.epochs,
    }
    print("train with:\n  allennlp train training_config/bilm/small.jsonnet -s "
          f"{os.path.join(args.directory, args.run)} -o '{json.dumps(overrides)}'")


def evaluate(args) -> None:
    torch.set_num_threads(args.threads)
    run = os.path.join(args.directory, args.run)
    archive = load_archive(os.path.join(run, "model.tar.gz"))
    model, vocabulary = archive.model, archive.model.vocab
    model.eval()
    metrics = json.load(open(os.path.join(run, "metrics.json")))
    print(f"trained: {metrics.get('epoch', -1) + 1} epochs in {metrics.get('training_duration')}; "
          f"best epoch {metrics.get('best_epoch')}, its validation perplexity "
          f"{metrics.get('best_validation_perplexity', float('nan')):.1f}; softmax vocabulary "
          f"{vocabulary.get_vocab_size('lm_tokens')} words")
    print_test_perplexities(model, vocabulary, os.path.join(args.directory, "corpus", "brown_heldout.txt"),
                            HELDOUT_BROWN)


READ_PASS = """
import json, resource, sys, time
from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.bilm_window_loader import BiLmWindowLoader
directory, in_memory = sys.argv[1], json.loads(sys.argv[2])
vocabulary = BiLmVocabulary.from_files(directory + "/" + sys.argv[5] + "/vocabulary")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
reader = BiLmCorpusReader(window_size=int(sys.argv[3]), num_streams=int(sys.argv[4]), shuffle=True)
loader = BiLmWindowLoader(reader, directory + "/corpus/train/*.txt", max_instances_in_memory=in_memory, quiet=True)
loader.index_with(vocabulary)
batches = sum(1 for _ in loader)
print(json.dumps({"batches": batches, "seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before}))
"""


def reading(args) -> None:
    tokens = sum(len(line.split()) for shard in sorted(os.listdir(os.path.join(args.directory, "corpus", "train")))
                 for line in open(os.path.join(args.directory, "corpus", "train", shard), encoding="utf-8"))
    for label, in_memory in (("lazily, 32 batches ahead", 32 * STREAMS), ("all at once", None)):
        completed = subprocess.run(
            [sys.executable, "-c", READ_PASS, args.directory, json.dumps(in_memory), str(WINDOW_SIZE), str(STREAMS),
             args.run],
            capture_output=True, text=True, check=True,
        )
        result = json.loads(completed.stdout.strip().splitlines()[-1])
        print(f"{label}: {result['batches']} batches of {STREAMS} windows in {result['seconds']:.1f} s; "
              f"peak memory above the start {result['peak_mb']:.0f} MB "
              f"({result['peak_mb'] * 1024 / tokens:.2f} KB per token of {tokens})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["prepare", "evaluate", "reading"])
    parser.add_argument("directory")
    parser.add_argument("--precision", default="bfloat16", choices=TRAINING_PRECISIONS)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--run", default="run", help="the training run's directory, under `directory`")
    args = parser.parse_args()
    {"prepare": prepare, "evaluate": evaluate, "reading": reading}[args.part](args)


if __name__ == "__main__":
    main()
