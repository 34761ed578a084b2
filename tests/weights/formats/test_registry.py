"""
The weight-format seam: formats are found by what the paths hold, and a new format is one
class registered as `WeightFormat` (here one defined by the test itself), with nothing else
edited.
"""
import json
import os
from typing import Dict, Optional

import numpy
import pytest
import torch
from allennlp.common import Registrable
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.weights.formats import (
    BiLmWeights,
    ModelFiles,
    WeightFormat,
    read_bilm_weights,
    registered_formats,
    write_bilm_weights,
)
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


class NpzDirectoryFormat(WeightFormat):
    """A toy format: a directory with `architecture.json` and `arrays.npz`."""

    expects = "a directory with architecture.json and arrays.npz"

    def recognizes(self, files: ModelFiles) -> bool:
        path = files.weight_path or files.options_path
        return path is not None and os.path.isfile(os.path.join(path, "arrays.npz"))

    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        directory = files.weight_path or files.options_path
        with open(os.path.join(directory, "architecture.json")) as handle:
            options = ElmoOptions.from_dict(json.load(handle))
        with numpy.load(os.path.join(directory, "arrays.npz")) as stored:
            arrays = {name.replace("|", "/"): stored[name] for name in stored.files}
        return BiLmWeights(options, arrays, source=directory)

    def write(self, weights: BiLmWeights, directory: str) -> Dict[str, str]:
        paths = {"options": os.path.join(directory, "architecture.json"),
                 "weights": os.path.join(directory, "arrays.npz")}
        with open(paths["options"], "w") as handle:
            json.dump(weights.options.to_dict(), handle)
        numpy.savez(paths["weights"], **{n.replace("/", "|"): a for n, a in weights.arrays.items()})
        return paths


@pytest.fixture
def registered(request):
    """Registers format classes for one test and removes them afterwards."""
    names = []

    def register(name, cls):
        WeightFormat.register(name)(cls)
        names.append(name)

    yield register
    for name in names:
        Registrable._registry[WeightFormat].pop(name)


def test_the_published_format_is_registered_and_read_from_two_files():
    assert "published" in [f.name for f in registered_formats()]
    weights = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    assert weights.options == ElmoOptions.from_file(ELMO_OPTIONS_FILE)
    assert "CNN_proj/W_proj" in weights.arrays and ELMO_WEIGHT_FILE in weights.source


def test_a_new_format_is_one_registered_class(registered, tmp_path):
    registered("npz_directory", NpzDirectoryFormat)
    published = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    paths = write_bilm_weights(published, str(tmp_path / "model"), "npz_directory")
    assert sorted(os.listdir(tmp_path / "model")) == ["architecture.json", "arrays.npz"]
    ids = batch_to_ids([["The", "cat", "sat"], ["x"]])
    from_npz = ElmoBiLm(str(tmp_path / "model"), str(tmp_path / "model"), stateful=False)
    reference = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    for ours, theirs in zip(from_npz(ids)["activations"], reference(ids)["activations"]):
        assert torch.equal(ours, theirs)
    assert paths["weights"].endswith("arrays.npz")


def test_no_matching_format_names_what_each_expects(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ConfigurationError, match=r"is not a biLM in any known format \(.* holds notes.txt; "
                                                 r"expected allennlp_bilm: .*; elmoformanylangs: .*; published: an options"):
        read_bilm_weights(str(tmp_path), str(tmp_path))


def test_overlapping_recognisers_are_an_error(registered, tmp_path):
    class Greedy(WeightFormat):
        def recognizes(self, files):
            return True

    registered("greedy", Greedy)
    with pytest.raises(ConfigurationError, match="could be read as any of the ELMo weight formats greedy, published"):
        read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)


def test_writing_names_unknown_and_read_only_formats(registered, tmp_path):
    weights = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    with pytest.raises(ConfigurationError, match="Unknown ELMo weight format 'nope'; known: .*published"):
        write_bilm_weights(weights, str(tmp_path), "nope")

    class ReadOnly(WeightFormat):
        def recognizes(self, files):
            return False

    registered("read_only", ReadOnly)
    with pytest.raises(ConfigurationError, match="'read_only' can be read, not written"):
        write_bilm_weights(weights, str(tmp_path), "read_only")


def test_parsed_options_check_the_published_layout():
    options = ElmoOptions.from_file(ELMO_OPTIONS_FILE)
    assert read_bilm_weights(options, ELMO_WEIGHT_FILE).options is options
