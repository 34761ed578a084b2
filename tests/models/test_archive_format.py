"""
A trained `elmo_bilm` model's archive or serialization directory read as ELMo files
(`elmo_plugin.models.archive_format`), as its export would be.
"""
import json
import shutil

import numpy
import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmo_plugin.inference.elmo_embedder import ElmoEmbedder
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models.export import export_bilm
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import ElmoOptions

SENTENCES = [["the", "neural", "models", "."], ["a", "wörds", "x" * 60]]


@pytest.mark.parametrize("where", ["model.tar.gz", "."])
def test_the_trained_biLM_reads_as_its_export(trained_tiny_bilm, tmp_path, where):
    exported = export_bilm(str(trained_tiny_bilm / "model.tar.gz"), str(tmp_path / "elmo"), with_softmax=True)
    source = str(trained_tiny_bilm / where)
    expected = read_bilm_weights(exported["options"], exported["weights"])
    actual = read_bilm_weights(source, None)
    assert actual.options == expected.options
    assert sorted(actual.arrays) == sorted(expected.arrays)
    for name, array in expected.arrays.items():
        numpy.testing.assert_array_equal(actual.arrays[name], array, err_msg=name)
    # As the weight file of AllenNLP 0.9's `ElmoEmbedder(weight_file=...)`, with the default options.
    vectors = ElmoEmbedder(weight_file=source).embed_sentences(SENTENCES)
    for got, want in zip(vectors, ElmoEmbedder(exported["options"], exported["weights"]).embed_sentences(SENTENCES)):
        numpy.testing.assert_array_equal(got, want)


def test_fine_tuning_from_the_archive_starts_from_its_softmax(trained_tiny_bilm):
    trained = load_archive(str(trained_tiny_bilm / "model.tar.gz")).model
    tuned = ElmoBiLmModel(trained.vocab, weight_file=str(trained_tiny_bilm / "model.tar.gz"), num_samples=8)
    for name, array in trained.softmax_arrays().items():
        numpy.testing.assert_array_equal(tuned.softmax_arrays()[name], array, err_msg=name)


def test_other_options_given_with_the_archive_are_refused(trained_tiny_bilm):
    options = read_bilm_weights(str(trained_tiny_bilm / "model.tar.gz"), None).options
    other = ElmoOptions.from_dict({**options.to_dict(), "lstm": {**options.to_dict()["lstm"], "cell_clip": 1.0}})
    with pytest.raises(ConfigurationError, match=r"model.tar.gz holds a biLM whose cell_clip differ"):
        read_bilm_weights(other, str(trained_tiny_bilm / "model.tar.gz"))


def test_a_damaged_or_foreign_model_directory_is_named(trained_tiny_bilm, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(trained_tiny_bilm, damaged, ignore=shutil.ignore_patterns("*.tar.gz", "*state*"))
    (damaged / "best.th").write_bytes((trained_tiny_bilm / "best.th").read_bytes()[:1000])
    with pytest.raises(ConfigurationError, match=r"Cannot read the trained biLM .*damaged: its weights are damaged"):
        read_bilm_weights(str(damaged), None)
    # Another AllenNLP model is not read as a biLM: the error lists what each format expects.
    config = json.loads((damaged / "config.json").read_text())
    config["model"]["type"] = "simple_tagger"
    (damaged / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigurationError, match=r"not a biLM in any known format.*allennlp_bilm: an archive"):
        read_bilm_weights(str(damaged), None)
