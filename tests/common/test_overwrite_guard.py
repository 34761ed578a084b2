"""
No command writes over its own inputs, --overwrite or not: embedding output over the weights or
the options, token vectors over the word list, imports and exports into the model they read.
"""
import os
import shutil

import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
from elmo_plugin.common.overwrite_guard import refuse_writing_over_inputs
from elmo_plugin.inference.static_word_vectors import write_token_vectors
from elmo_plugin.models.export import export_bilm
from elmo_plugin.weights.conversion import convert_bilm
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


@pytest.fixture
def model(tmp_path):
    """Writable copies of the fixture biLM's files, and an input text."""
    shutil.copy(ELMO_OPTIONS_FILE, tmp_path / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, tmp_path / "weights.hdf5")
    (tmp_path / "in.txt").write_text("a b c\n")
    return tmp_path


def contents(directory):
    return {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}


@pytest.mark.parametrize("output", ["weights.hdf5", "options.json", "link_to_weights.hdf5"])
def test_embedding_output_over_a_model_file_is_refused(model, output):
    os.symlink(model / "weights.hdf5", model / "link_to_weights.hdf5")
    before = contents(model)
    embedder = ElmoEmbedder(str(model / "options.json"), str(model / "weights.hdf5"))
    with pytest.raises(ConfigurationError, match="allennlp elmo: the output .* is the input .*--overwrite or not"):
        embedder.embed_file(str(model / "in.txt"), str(model / output), overwrite=True)
    assert contents(model) == before


def test_embedding_output_into_a_model_directory_is_refused(model):
    directory = model / "model_dir"
    directory.mkdir()
    shutil.copy(model / "options.json", directory)
    shutil.copy(model / "weights.hdf5", directory)
    embedder = ElmoEmbedder(weight_file=str(directory))
    with pytest.raises(ConfigurationError, match="would be written into the input"):
        embedder.embed_file(str(model / "in.txt"), str(directory / "vectors.hdf5"))
    assert sorted(os.listdir(directory)) == ["options.json", "weights.hdf5"]


@pytest.mark.parametrize("prefix", ["words", "weights"])  # words.txt: the word list; weights.hdf5
def test_token_vectors_over_their_inputs_are_refused(model, prefix):
    words = model / "words.txt"
    words.write_text("the\ncat\n")
    before = contents(model)
    with pytest.raises(ConfigurationError, match="elmo-token-vectors: the output .* is the input"):
        write_token_vectors(str(words), str(model / prefix), str(model / "options.json"), str(model / "weights.hdf5"),
                            overwrite=True)
    assert contents(model) == before


def test_an_import_into_its_own_source_is_refused(model):
    before = contents(model)
    with pytest.raises(ConfigurationError, match="elmo-import: the output .*options.json is the input"):
        convert_bilm(str(model / "weights.hdf5"), str(model), options_file=str(model / "options.json"), overwrite=True)
    directory = model / "model_dir"
    directory.mkdir()
    shutil.copy(model / "options.json", directory)
    shutil.copy(model / "weights.hdf5", directory)
    with pytest.raises(ConfigurationError, match="would be written into the input"):
        convert_bilm(str(directory), str(directory), overwrite=True)
    assert contents(model) == before


def test_an_export_into_the_serialization_directory_is_refused(trained_tiny_bilm):
    before = sorted(os.listdir(trained_tiny_bilm))
    with pytest.raises(ConfigurationError, match="elmo-export: the output .* would be written into the input"):
        export_bilm(str(trained_tiny_bilm), str(trained_tiny_bilm), overwrite=True)
    assert sorted(os.listdir(trained_tiny_bilm)) == before


def test_urls_and_missing_paths_are_not_inputs_to_protect(tmp_path):
    refuse_writing_over_inputs("x", [str(tmp_path / "out.hdf5")], [None, "https://example.org/w.hdf5", "nowhere"])
