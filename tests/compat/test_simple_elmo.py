"""NLPL simple_elmo's ElmoModel on this package: its shapes and values from our ElmoEmbedder."""
import shutil

import numpy
import pytest

from elmo_plugin import ElmoEmbedder
from elmo_plugin.compat.simple_elmo import ElmoModel
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

SENTENCES = [["The", "cat", "sat", "."], ["A", "dog"], []]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("nlpl_model")
    shutil.copy(ELMO_OPTIONS_FILE, directory / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, directory / "model.hdf5")  # NLPL's name
    loaded = ElmoModel()
    loaded.load(str(directory), max_batch_size=2)
    return loaded


def test_token_vectors_in_simple_elmos_shapes(model):
    layers = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_batch(SENTENCES)
    average, top, every = (model.get_elmo_vectors(SENTENCES, layers=name) for name in ("average", "top", "all"))
    assert average.shape == top.shape == (3, 4, 32) and every.shape == (3, 3, 4, 32)
    for row, sentence in enumerate(layers):
        n = sentence.shape[1]
        numpy.testing.assert_allclose(average[row, :n], sentence.mean(axis=0), atol=1e-6)
        numpy.testing.assert_allclose(top[row, :n], sentence[-1], atol=1e-6)
        numpy.testing.assert_allclose(every[row, :, :n], sentence, atol=1e-6)
        assert not average[row, n:].any()  # zero padding


def test_sentence_averages_are_unit_vectors(model):
    averages = model.get_elmo_vector_average(SENTENCES)
    assert averages.shape == (3, 32)
    layers = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_batch(SENTENCES[:1])[0]
    expected = layers.mean(axis=0).sum(axis=0)
    numpy.testing.assert_allclose(averages[0], expected / numpy.linalg.norm(expected), atol=1e-6)
    assert not averages[2].any()  # an empty sentence
    with pytest.raises(ValueError, match="layers must be one of"):
        model.get_elmo_vectors(SENTENCES, layers="bottom")
