"""
A biLM is used only when it is whole and finite: options without weights are refused at every
entry point that loads a biLM for use (random weights only when asked for), and so are
non-finite weights (naming the dataset and row) and non-finite options (naming the key).
"""
import json
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmo_plugin import Elmo, ElmoBiLm, ElmoEmbedder, ElmoTokenEmbedder
from elmo_plugin.inference.static_word_vectors import write_token_vectors
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, fixture_options

WITHOUT_WEIGHTS = "come without weights: name the biLM's weight file"


@pytest.mark.parametrize("load", [
    lambda: ElmoBiLm(ELMO_OPTIONS_FILE, None),
    lambda: ElmoBiLm(ElmoOptions.from_file(ELMO_OPTIONS_FILE), None),
    lambda: Elmo(ELMO_OPTIONS_FILE, None, 1),
    lambda: ElmoEmbedder(ELMO_OPTIONS_FILE),
    lambda: ElmoTokenEmbedder.from_params(Params({"options_file": ELMO_OPTIONS_FILE})),
], ids=["ElmoBiLm", "ElmoBiLm parsed options", "Elmo", "ElmoEmbedder", "elmo_token_embedder"])
def test_options_without_weights_are_refused(load):
    with pytest.raises(ConfigurationError, match=WITHOUT_WEIGHTS):
        load()


def test_static_word_vectorss_refuse_options_without_weights(tmp_path):
    (tmp_path / "words.txt").write_text("the\ncat\n")
    with pytest.raises(ConfigurationError, match=WITHOUT_WEIGHTS):
        write_token_vectors(str(tmp_path / "words.txt"), str(tmp_path / "vectors"), ELMO_OPTIONS_FILE, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["words.txt"]


def test_random_weights_only_when_asked_for():
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, None, random_weights=True)
    assert bilm.get_output_dim() == 32


def test_the_command_line_refuses_options_without_weights(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n")
    completed = subprocess.run(
        [sys.executable, "-m", "elmo_plugin", "elmo", "in.txt", "out.hdf5", "--all", "--options-file",
         ELMO_OPTIONS_FILE], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert completed.returncode != 0
    assert WITHOUT_WEIGHTS in completed.stderr
    assert not (tmp_path / "out.hdf5").exists()


def damaged_copy(tmp_path, dataset: str, index) -> str:
    path = tmp_path / "weights.hdf5"
    shutil.copy(ELMO_WEIGHT_FILE, path)
    with h5py.File(path, "r+") as handle:
        values = handle[dataset][...]
        values[index] = numpy.nan if "W_0" in dataset else numpy.inf
        handle[dataset][...] = values
    return str(path)


@pytest.mark.parametrize("dataset, index, row", [
    ("RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0", (7, 3), 7),
    ("CNN_high_0/b_carry", (5,), None),
])
def test_non_finite_weights_are_refused_by_dataset_and_row(tmp_path, dataset, index, row):
    path = damaged_copy(tmp_path, dataset, index)
    with pytest.raises(ConfigurationError) as raised:
        ElmoBiLm(ELMO_OPTIONS_FILE, path)
    message = str(raised.value)
    assert f"'{dataset}' holds 1 non-finite value" in message
    assert (f"row {row}," in message) == (row is not None)


@pytest.mark.parametrize("key, value", [("lstm.cell_clip", float("nan")), ("lstm.proj_clip", float("inf")),
                                        ("char_cnn.embedding.dim", float("nan")), ("dropout", float("-inf"))])
def test_non_finite_options_are_refused_by_key(tmp_path, key, value):
    options = fixture_options()
    node = options
    *parents, last = key.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))  # json writes NaN / Infinity, as a careless tool would
    with pytest.raises(ConfigurationError, match=f"'{key}' must be a finite number"):
        ElmoOptions.from_file(str(path))
