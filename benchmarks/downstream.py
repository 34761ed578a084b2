"""
Does ELMo from a biLM trained with this package help a task with little labelled data?

1. The biLM: the published small architecture (2x1024_128_2048cnn_1xhighway, 256-dimensional
   ELMo) trained on the Brown corpus by `train_bilm.py brown` (pass its saved state with
   `--bilm-state`), or trained here for `--bilm-minutes`; exported with `elmo-export`'s code.
2. POS tagging on the WSJ sample (treebank.zip, traces removed): train on the first
   `--pos-train` sentences, model selection on the next 500, test on the last 1,000.
   `training_config/pos_elmo.jsonnet`.
3. Sentence polarity (sentence_polarity.zip, shuffled): train on `--sentiment-train`
   sentences, 500 for model selection, 2,000 for test. `training_config/sentiment_elmo.jsonnet`.

Each task runs its config as is (word embeddings from scratch, + char CNN for POS, + ELMo)
and without ELMo (the ELMo indexer and embedder removed, the encoder's input shrunk
accordingly), for each seed, with the same number of epochs and early-stopping rule; the
test score is that of the best epoch on the model-selection set.

    python benchmarks/train_bilm.py brown --minutes 20    # writes benchmarks/output/brown_bilm.th
    python benchmarks/downstream.py --bilm-state benchmarks/output/brown_bilm.th
    # the opt-in fast precisions' downstream cost: seed 1's POS model re-scored with each
    python benchmarks/downstream.py --bilm-state benchmarks/output/brown_bilm.th --tasks pos \
        --seeds 1 --precisions bfloat16 int8

Needs ../shared/data (brown.zip, treebank.zip, sentence_polarity.zip).
"""
import argparse
import copy
import json
import logging
import os
import random
import statistics
import tempfile
import time
import zipfile
from typing import Dict, List, Tuple
from unittest import mock

import torch
from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.data import DatasetReader
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.training.util import evaluate
from nltk import Tree
from train_bilm import SHARED_DATA, make_model, prepare_brown, train_on_brown

from elmo_plugin import ElmoBiLm
from elmo_plugin.commands.export import export_bilm_model

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(REPO_ROOT, "training_config")
ELMO_DIM = 256  # the small architecture: 2 x projection_dim 128


def export_brown_bilm(args, directory: str) -> Dict[str, str]:
    """The Brown biLM's ELMo files in `directory`."""
    if args.bilm_state:
        # prepare_brown is deterministic: the same vocabulary the state was trained with.
        _, _, vocabulary = prepare_brown(directory)
        model = make_model(vocabulary)
        model.load_state_dict(torch.load(args.bilm_state, map_location="cpu"))
        print(f"biLM: {args.bilm_state} (trained by train_bilm.py brown)")
    else:
        start = time.perf_counter()
        model, vocabulary, steps, _, _ = train_on_brown(directory, 32, max_seconds=args.bilm_minutes * 60)
        print(f"biLM: trained on Brown for {(time.perf_counter() - start) / 60:.0f} min, {len(steps)} steps")
    return export_bilm_model(model, os.path.join(directory, "elmo"))


def write_lines(path: str, lines: List[str]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in lines)
    return path


def parse_trees(text: str) -> List[Tree]:
    """The bracketed trees of a .mrg file (nltk's corpus reader refuses paths outside its data)."""
    trees, depth, start = [], 0, 0
    for position, character in enumerate(text):
        if character == "(":
            depth, start = depth + 1, position if depth == 0 else start
        elif character == ")":
            depth -= 1
            if depth == 0:
                trees.append(Tree.fromstring(text[start:position + 1], remove_empty_top_bracketing=True))
    return trees


def pos_data(directory: str, train_size: int) -> Tuple[str, str, str]:
    """WSJ sample as `word/TAG` lines: (train, dev, test) paths."""
    sentences = []
    with zipfile.ZipFile(os.path.join(SHARED_DATA, "treebank.zip")) as archive:
        for name in sorted(n for n in archive.namelist() if n.startswith("treebank/combined/wsj_")):
            for tree in parse_trees(archive.read(name).decode("utf-8")):
                sentences.append(" ".join(f"{word}/{tag}" for word, tag in tree.pos() if tag != "-NONE-"))
    test, dev, train = sentences[-1000:], sentences[-1500:-1000], sentences[:train_size]
    assert train_size <= len(sentences) - 1500, f"only {len(sentences) - 1500} training sentences"
    return tuple(
        write_lines(os.path.join(directory, f"pos_{name}.txt"), lines)
        for name, lines in (("train", train), ("dev", dev), ("test", test))
    )


def sentiment_data(directory: str, train_size: int) -> Tuple[str, str, str]:
    """Movie-review sentences as text_classification_json lines: (train, dev, test) paths."""
    examples = []
    with zipfile.ZipFile(os.path.join(SHARED_DATA, "sentence_polarity.zip")) as archive:
        for label in ("pos", "neg"):
            text = archive.read(f"sentence_polarity/rt-polarity.{label}").decode("latin-1")
            examples.extend(json.dumps({"text": line.strip(), "label": label})
                            for line in text.splitlines() if line.strip())
    random.Random(0).shuffle(examples)
    test, dev, train = examples[:2000], examples[2000:2500], examples[2500:2500 + train_size]
    return tuple(
        write_lines(os.path.join(directory, f"sentiment_{name}.jsonl"), lines)
        for name, lines in (("train", train), ("dev", dev), ("test", test))
    )


def without_elmo(params: Dict) -> Dict:
    """The same model without ELMo: indexer and embedder removed, encoder input shrunk."""
    params = copy.deepcopy(params)
    del params["dataset_reader"]["token_indexers"]["elmo"]
    del params["model"]["text_field_embedder"]["token_embedders"]["elmo"]
    del params["model"]["regularizer"]  # it regularises ELMo's scalar mix only
    encoder = params["model"].get("encoder") or params["model"]["seq2vec_encoder"]
    encoder["input_size"] -= ELMO_DIM
    return params


def run_task(config: str, prefix: str, data: Tuple[str, str, str], elmo: Dict[str, str],
             seed: int, epochs: int, with_elmo: bool, directory: str,
             precisions: List[str]) -> Tuple[float, float, int]:
    """(test score, seconds, epochs trained) of one model."""
    train, dev, test = data
    environment = {
        f"{prefix}_TRAIN_DATA_PATH": train,
        f"{prefix}_VALIDATION_DATA_PATH": dev,
        "ELMO_OPTIONS_FILE": elmo["options"],
        "ELMO_WEIGHT_FILE": elmo["weights"],
        "ELMO_DIM": str(ELMO_DIM),
    }
    overrides = {
        "trainer.num_epochs": epochs,
        "trainer.cuda_device": -1,
        "test_data_path": test,
        "evaluate_on_test": True,
        "random_seed": seed,
        "numpy_seed": seed,
        "pytorch_seed": seed,
    }
    with mock.patch.dict(os.environ, environment):
        params = Params.from_file(os.path.join(CONFIGS, config), json.dumps(overrides)).as_dict()
    if not with_elmo:
        params = without_elmo(params)
    serialization_dir = os.path.join(directory, f"{prefix}_{'elmo' if with_elmo else 'base'}_{seed}")
    start = time.perf_counter()
    model = train_model(Params(copy.deepcopy(params)), serialization_dir)  # it pops what it reads
    seconds = time.perf_counter() - start
    with open(os.path.join(serialization_dir, "metrics.json")) as handle:
        metrics = json.load(handle)
    if with_elmo and precisions:
        print(f"  seed {seed}, the trained model's test accuracy with its ELMo in "
              + ", ".join(f"{p}: {accuracy_with_precision(model, params, test, p):.4f}"
                          for p in ("float32",) + tuple(precisions)))
    return metrics["test_accuracy"], seconds, metrics["epoch"] + 1


def accuracy_with_precision(model, params: Dict, test_path: str, precision: str) -> float:
    """Test accuracy of a trained model whose (frozen) biLM computes in `precision`."""
    bilm = next(module for module in model.modules() if isinstance(module, ElmoBiLm))
    bilm.set_precision(precision)
    reader = DatasetReader.from_params(Params(copy.deepcopy(params["dataset_reader"])))
    loader = MultiProcessDataLoader(reader, test_path, batch_size=32)
    loader.index_with(model.vocab)
    accuracy = evaluate(model, loader)["accuracy"]
    bilm.set_precision("float32")
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bilm-state", help="a state dict written by `train_bilm.py brown`")
    parser.add_argument("--bilm-minutes", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pos-train", type=int, default=500)
    parser.add_argument("--pos-epochs", type=int, default=10)
    parser.add_argument("--sentiment-train", type=int, default=1000)
    parser.add_argument("--sentiment-epochs", type=int, default=8)
    parser.add_argument("--tasks", default="pos,sentiment")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precisions", nargs="*", default=[],
                        help="also score seed 1's ELMo model with its biLM in these precisions "
                        "(bfloat16, int8): the downstream cost of the opt-in fast modes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)  # AllenNLP's per-epoch logging would bury the figures

    with tempfile.TemporaryDirectory() as directory:
        elmo = export_brown_bilm(args, directory)
        tasks = {
            "pos": ("pos_elmo.jsonnet", "POS", pos_data(directory, args.pos_train), args.pos_epochs,
                    f"POS tagging, WSJ sample, {args.pos_train} training sentences, accuracy"),
            "sentiment": ("sentiment_elmo.jsonnet", "SENTIMENT",
                          sentiment_data(directory, args.sentiment_train), args.sentiment_epochs,
                          f"sentence polarity, {args.sentiment_train} training sentences, accuracy"),
        }
        for name in args.tasks.split(","):
            config, prefix, data, epochs, description = tasks[name]
            print(f"\n{description} (test), up to {epochs} epochs, seeds 1..{args.seeds}")
            results = {}
            for with_elmo in (False, True):
                scores, seconds, trained = [], [], []
                for seed in range(1, args.seeds + 1):
                    score, took, epochs_trained = run_task(
                        config, prefix, data, elmo, seed, epochs, with_elmo, directory,
                        args.precisions if seed == 1 else [])
                    scores.append(score)
                    seconds.append(took)
                    trained.append(epochs_trained)
                label = "with ELMo" if with_elmo else "without ELMo"
                results[label] = scores
                spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
                print(f"  {label:13s} {statistics.mean(scores):.4f} +- {spread:.4f}  "
                      f"(seeds: {', '.join(f'{s:.4f}' for s in scores)}; epochs {trained}; "
                      f"{statistics.mean(seconds):.0f} s per model)", flush=True)
            gain = statistics.mean(results["with ELMo"]) - statistics.mean(results["without ELMo"])
            print(f"  gain {gain:+.4f}")


if __name__ == "__main__":
    main()
