"""
A trained model loads without the ELMo files its config names (`elmo_plugin.weights.recorded`):
from another directory, after the files moved, on a machine without them.
"""

import numpy
import pytest
import torch
from allennlp.commands.train import train_model
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmo_plugin.data.character_mapper import batch_to_ids
from elmo_plugin.modules.elmo import Elmo
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats import BiLmWeights, write_bilm_weights
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.recorded import RECORD_KEY
from tests.fixtures.elmoformanylangs_model import make_model
from tests.helpers import ELMO_FIXTURES, TEST_FIXTURES, copy_of_the_fixture_biLM
from tests.random_weights import random_weight_arrays

SENTENCES = [["The", "cat", "sat", "on", "ковре"], ["我们", "ran", "."]]


def tagger_params(**embedder):
    """A tagger whose ELMo files are named relative to the directory it is trained in."""
    indexer = {"type": "elmo_characters"}
    if "namespace_to_cache" in embedder:
        indexer["cache_namespace"] = embedder["namespace_to_cache"]
    return Params({
        "dataset_reader": {"type": "sequence_tagging", "token_indexers": {"elmo": indexer}},
        "train_data_path": str(TEST_FIXTURES / "tagging" / "sentences.txt"),
        "model": {
            "type": "simple_tagger",
            "text_field_embedder": {"token_embedders": {"elmo": {
                "type": "elmo_token_embedder", "options_file": "elmo/options.json",
                "weight_file": "elmo/lm_weights.hdf5", "dropout": 0.0, **embedder}}},
            "encoder": {"type": "pass_through", "input_dim": 32},
        },
        "data_loader": {"batch_size": 4},
        "trainer": {"num_epochs": 1, "optimizer": {"type": "adam", "lr": 0.01}, "cuda_device": -1},
    })


def tagger_logits(archive_path, cuda_device=-1):
    archive = load_archive(str(archive_path), cuda_device=cuda_device)
    instances = list(archive.dataset_reader.read(str(TEST_FIXTURES / "tagging" / "sentences.txt")))
    return [output["logits"] for output in archive.model.forward_on_instances(instances)]


@pytest.mark.parametrize(
    "embedder",
    [
        {},
        # Fine-tuned, with cached word vectors: their <S> and </S> vectors come from the char
        # CNN as it was before training, which the archive's weights no longer hold.
        {"namespace_to_cache": "elmo_words", "requires_grad": True},
        {"precision": "bfloat16", "stateful": False},
    ],
    ids=["frozen", "fine_tuned_with_cached_words", "bfloat16"],
)
def test_a_trained_tagger_loads_without_its_elmo_files(tmp_path, monkeypatch, embedder):
    training_dir = tmp_path / "project"
    copy_of_the_fixture_biLM(training_dir / "elmo")
    monkeypatch.chdir(training_dir)
    train_model(tagger_params(**embedder), str(training_dir / "run"))
    archive = training_dir / "run" / "model.tar.gz"
    expected = tagger_logits(archive)

    (training_dir / "elmo").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    actual = tagger_logits(archive)

    for got, want in zip(actual, expected):
        numpy.testing.assert_array_equal(got, want)


def built_again_without_files(directory, tmp_path, settings=ElmoSettings()):
    """The biLM whose files are in `directory`, and the same biLM built from a saved state dict
    after its files moved away (as AllenNLP loads a model: built, then its state loaded)."""
    model_dir = tmp_path / "model_dir"
    model_dir.mkdir()
    original = ElmoBiLm(str(directory), None, settings=settings)
    torch.save(original.state_dict(), model_dir / "weights.th")
    directory.rename(tmp_path / "moved")
    rebuilt = ElmoBiLm(str(directory), None, settings=settings, serialization_dir=str(model_dir))
    rebuilt.load_state_dict(torch.load(model_dir / "weights.th"))
    return original, rebuilt


def assert_same_layers(original, rebuilt):
    character_ids = original.character_ids(SENTENCES)
    with torch.no_grad():
        expected, actual = original(character_ids)["activations"], rebuilt(character_ids)["activations"]
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_an_elmoformanylangs_biLM_keeps_its_vocabularies(tmp_path):
    directory = tmp_path / "manylangs"
    make_model(str(directory))
    original, rebuilt = built_again_without_files(directory, tmp_path)
    assert rebuilt.token_embedder.vocabularies() == original.token_embedder.vocabularies()
    assert len(rebuilt.token_embedder.characters) > 100
    assert_same_layers(original, rebuilt)


def test_a_word_input_biLM_keeps_its_words(tmp_path):
    words = ["<S>", "</S>", "<UNK>", "The", "cat", "sat", "ran", "."]
    options = ElmoOptions.from_dict({
        "lstm": {"dim": 16, "projection_dim": 8, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "n_tokens_vocab": len(words),
    })
    arrays = random_weight_arrays(options)
    arrays[layout.VOCABULARY] = numpy.array(words, dtype=object)
    directory = tmp_path / "words"
    write_bilm_weights(BiLmWeights(options, arrays, source="random weights"), str(directory), "published")
    original, rebuilt = built_again_without_files(directory, tmp_path)
    assert rebuilt.vocabulary == words
    assert_same_layers(original, rebuilt)


def test_the_record_leaves_the_state_dict_keys_alone(tmp_path):
    bilm = ElmoBiLm(str(ELMO_FIXTURES / "options.json"), str(ELMO_FIXTURES / "lm_weights.hdf5"))
    state = bilm.state_dict()
    assert not any("record" in key or "extra" in key for key in state)
    assert state._metadata[""][RECORD_KEY]["files"] == [str(ELMO_FIXTURES / "options.json"),
                                                        str(ELMO_FIXTURES / "lm_weights.hdf5")]
    # A biLM built from the files reads them, and a model with no record is read as before.
    ElmoBiLm(str(ELMO_FIXTURES / "options.json"), str(ELMO_FIXTURES / "lm_weights.hdf5"),
             serialization_dir=str(tmp_path))


def test_a_model_without_a_record_names_why_it_needs_the_files(tmp_path):
    torch.save({"weight": torch.zeros(1)}, tmp_path / "best.th")  # trained before records
    with pytest.raises(ConfigurationError) as error:
        ElmoBiLm("gone/options.json", "gone/weights.hdf5", serialization_dir=str(tmp_path))
    message = str(error.value)
    assert "The ELMo weight file gone/weights.hdf5 does not exist." in message
    assert "its weights do not record it" in message and "--overrides" in message


def test_a_character_ids_batch_embeds_the_same_after_the_files_moved(tmp_path):
    directory = tmp_path / "elmo"
    copy_of_the_fixture_biLM(directory)
    settings = ElmoSettings(vocab_to_cache=["The", "cat", "dog"], stateful=False)
    original, rebuilt = built_again_without_files(directory, tmp_path, settings)
    torch.testing.assert_close(rebuilt._word_embedding.boundary_vectors[0], original._word_embedding.boundary_vectors[0],
                               rtol=0, atol=0)
    word_ids = torch.tensor([[1, 2, 3], [3, 1, 0]])
    character_ids = batch_to_ids([["The", "cat", "dog"], ["dog", "The"]])
    with torch.no_grad():
        expected = original(character_ids, word_ids)["activations"]
        actual = rebuilt(character_ids, word_ids)["activations"]
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_elmo_built_by_a_config_finds_the_record_too(tmp_path):
    # A model of a user's own whose config builds `Elmo`: AllenNLP passes `serialization_dir`
    # down to it as to the token embedder.
    directory = tmp_path / "elmo"
    copy_of_the_fixture_biLM(directory)
    params = {"options_file": str(directory / "options.json"), "weight_file": str(directory / "lm_weights.hdf5"),
              "num_output_representations": 1, "dropout": 0.0}
    original = Elmo.from_params(Params(dict(params)))
    torch.save(original.state_dict(), tmp_path / "best.th")
    directory.rename(tmp_path / "moved")
    rebuilt = Elmo.from_params(Params(dict(params)), serialization_dir=str(tmp_path))
    rebuilt.load_state_dict(torch.load(tmp_path / "best.th"))
    character_ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(character_ids)["elmo_representations"][0],
                                   original(character_ids)["elmo_representations"][0], rtol=0, atol=0)
