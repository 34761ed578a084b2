"""Paths, architectures and markers shared by the tests."""
import copy
import json
import shutil
from pathlib import Path
from typing import Any, Dict

import h5py
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from elmo_plugin.kernels import onednn
from elmo_plugin.weights.pretrained import SMALL_OPTIONS

REPO_ROOT = Path(__file__).resolve().parent.parent
# shared/ lies beside the repository (read-only fixtures from the original ELMo code).
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
ELMO_FIXTURES = SHARED_FIXTURES / "elmo"
ELMO_OPTIONS_FILE = str(ELMO_FIXTURES / "options.json")
ELMO_WEIGHT_FILE = str(ELMO_FIXTURES / "lm_weights.hdf5")
TEST_FIXTURES = Path(__file__).resolve().parent / "fixtures"


def copy_of_the_fixture_biLM(directory: Path) -> None:
    """The fixture biLM's two files copied into `directory` (writable, and movable away)."""
    directory.mkdir(parents=True)
    for path in (ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE):
        shutil.copyfile(path, directory / Path(path).name)


def read_hdf5(path):
    """Every dataset of an HDF5 file by its key."""
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle}


def fixture_options() -> Dict[str, Any]:
    with open(ELMO_OPTIONS_FILE) as options_handle:
        return json.load(options_handle)


def tanh_three_layer_options() -> Dict[str, Any]:
    """tanh char CNN, one highway layer, three LSTM layers (different from every published one)."""
    options = fixture_options()
    options["char_cnn"]["activation"] = "tanh"
    options["char_cnn"]["n_highway"] = 1
    options["lstm"]["n_layers"] = 3
    return options


# The architectures every oracle test runs on.
ORACLE_ARCHITECTURES = {
    "fixture": fixture_options,
    "published_small": lambda: copy.deepcopy(SMALL_OPTIONS),
    "tanh_3_layers": tanh_three_layer_options,
}

# Three consecutive batches of different sizes and lengths (the carried state is resized:
# 3 rows, then 5, then 2), with hostile tokens and an empty sentence.
CARRIED_STATE_BATCHES = [
    [["The", "cat", "sat", "."], ["A", "dog"], ["über", "naïve", "東京", "x" * 60]],
    [["one"], [], ["a", "b", "c", "d", "e", "f", "g"], ["hello", "world"], ["z"]],
    [["last", "batch", "here", "now", "ok"], ["x"]],
]

# The biLM training configs and the tiny bilm-tf training corpus.
BILM_CONFIGS = REPO_ROOT / "training_config" / "bilm"
BILM_TRAIN_TEXT = str(SHARED_FIXTURES / "bilm_train" / "data.txt")
BILM_VOCAB_FILE = str(SHARED_FIXTURES / "bilm_train" / "vocab.txt")
BILM_SEED = 13


def bilm_data_overrides(**more: Any) -> str:
    """
    Overrides for a biLM config: absolute fixture paths (the configs' defaults are relative to
    the repository root), fixed seeds, and `more`.
    """
    overrides = {
        "train_data_path": BILM_TRAIN_TEXT,
        "validation_data_path": BILM_TRAIN_TEXT,
        "random_seed": BILM_SEED,
        "numpy_seed": BILM_SEED,
        "pytorch_seed": BILM_SEED,
        **more,
    }
    if "vocabulary" not in more:
        overrides["vocabulary.vocab_file"] = BILM_VOCAB_FILE
    return json.dumps(overrides)

# TensorFlow checkpoints and bilm-tf's own outputs (tests/fixtures/tensorflow/make_fixtures.py).
TENSORFLOW_FIXTURES = TEST_FIXTURES / "tensorflow"

# For tests of bfloat16 training's products.
needs_bfloat16 = pytest.mark.skipif(
    not (onednn.available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="this CPU or torch has no bfloat16 products",
)


class NewTensors(TorchDispatchMode):
    """The shapes and dtypes of the tensors that the operations inside the block make (views
    excluded)."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        outputs = func(*args, **(kwargs or {}))
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        for output in outputs if isinstance(outputs, (tuple, list)) else [outputs]:
            if isinstance(output, torch.Tensor) and not any(
                output.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in inputs
            ):
                self.made.append((tuple(output.shape), output.dtype))
        return outputs
