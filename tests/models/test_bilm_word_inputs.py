"""
The word-input biLM (options without `char_cnn`): trains with the same model type, exports,
reloads, and embeds through `Elmo` and `elmo_token_embedder` with identical results.
"""
import json

import numpy
import pytest
import torch
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models.archival import load_archive

from elmo_plugin import Elmo, ElmoBiLm, ElmoTokenEmbedder, batch_to_ids
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models.export import export_bilm
from elmo_plugin.models.trainable_bilm import TrainableBiLm
from elmo_plugin.weights.formats import read_bilm
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import BILM_CONFIGS, bilm_data_overrides

SENTENCES = [["neural", "networks", "are", "models", "."], ["the", "zebra", "net"], ["of"]]


@pytest.fixture(scope="module")
def trained_word_bilm(tmp_path_factory):
    serialization_dir = tmp_path_factory.mktemp("tiny_words")
    train_model_from_file(
        str(BILM_CONFIGS / "tiny_words.jsonnet"),
        str(serialization_dir),
        overrides=bilm_data_overrides(**{"model.dropout": 0.0}),
    )
    export_dir = serialization_dir / "elmo"
    export_bilm(str(serialization_dir / "model.tar.gz"), str(export_dir))
    model = load_archive(str(serialization_dir / "model.tar.gz")).model
    return serialization_dir, export_dir, model


def test_trains_with_a_tied_softmax(trained_word_bilm):
    serialization_dir, _, model = trained_word_bilm
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    # 32 words: a uniform guess has perplexity 32; the tiny corpus is learnt far below it.
    assert metrics["validation_perplexity"] < 8.0
    embedding = model.bilm.token_embedder.embedding.weight
    assert model._softmax_loss.softmax_w is embedding
    assert sum(p is embedding for p in model.parameters()) == 1  # counted and trained once


def test_export_holds_the_embedding_and_the_vocabulary(trained_word_bilm):
    _, export_dir, model = trained_word_bilm
    options = ElmoOptions.from_file(str(export_dir / "options.json"))
    assert options.word_inputs and options.share_embedding_softmax
    assert options.n_tokens_vocab == 32 and "char_cnn" not in options.to_dict()
    arrays = read_bilm_weights(options, str(export_dir / "weights.hdf5")).arrays
    assert list(arrays["vocabulary"]) == BiLmVocabulary.words(model.vocab)
    assert numpy.array_equal(arrays["embedding"], model.bilm.token_embedder.embedding.weight.detach().numpy())
    assert not any(name.startswith(("char_embed", "CNN")) for name in arrays)


def test_reloaded_biLM_embeds_as_the_trained_one(trained_word_bilm):
    _, export_dir, model = trained_word_bilm
    reloaded = ElmoBiLm(str(export_dir / "options.json"), str(export_dir / "weights.hdf5"), stateful=False)
    assert reloaded.vocabulary == BiLmVocabulary.words(model.vocab)
    trained = model.bilm
    trained.eval()
    character_ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        expected = trained.double()(character_ids.clone())
        actual = reloaded.double()(character_ids.clone())
    trained.float()
    assert torch.equal(actual["mask"], expected["mask"])
    for actual_layer, expected_layer in zip(actual["activations"], expected["activations"]):
        # The trained model keeps the file's bias convention; the loader folds TF's forget bias.
        torch.testing.assert_close(actual_layer, expected_layer, rtol=0, atol=1e-9)


def test_elmo_and_the_token_embedder_with_a_word_vocabulary(trained_word_bilm):
    _, export_dir, model = trained_word_bilm
    options_file, weight_file = str(export_dir / "options.json"), str(export_dir / "weights.hdf5")
    character_ids = batch_to_ids(SENTENCES)
    elmo = Elmo(options_file, weight_file, 1, dropout=0.0, stateful=False)
    from_characters = elmo(character_ids)["elmo_representations"][0]
    assert from_characters.shape == (3, 5, 32)

    vocab = Vocabulary()
    for sentence in SENTENCES:
        for word in sentence:
            vocab.add_token_to_namespace(word, "elmo_words")
    embedder = ElmoTokenEmbedder(
        options_file, weight_file, dropout=0.0, namespace_to_cache="elmo_words", vocab=vocab, stateful=False
    )
    word_ids = torch.tensor(
        [[vocab.get_token_index(w, "elmo_words") for w in s] + [0] * (5 - len(s)) for s in SENTENCES]
    )
    from_word_ids = embedder(character_ids, word_ids)
    torch.testing.assert_close(from_word_ids, from_characters, rtol=0, atol=1e-6)

    # "these" and "zebra" are not in the biLM's vocabulary: both read as <UNK>.
    bilm = elmo._elmo_lstm
    token_layer = bilm(batch_to_ids([["these"], ["zebra"], ["<UNK>"]]))["activations"][0][:, 1]
    torch.testing.assert_close(token_layer[0], token_layer[2])
    torch.testing.assert_close(token_layer[1], token_layer[2])
    # Static vectors (elmo-token-vectors) are rows of the embedding.
    unknown_id = model.vocab.get_token_index("<UNK>", "lm_tokens")
    vectors = bilm.token_vectors(["of", "zebra"])
    of_id = model.vocab.get_token_index("of", "lm_tokens")
    weight = bilm.token_embedder.embedding.weight
    torch.testing.assert_close(vectors, weight[[of_id, unknown_id]])


def test_vocabulary_mismatches_and_missing_vocabularies_are_refused(trained_word_bilm):
    _, export_dir, _ = trained_word_bilm
    options_file, weight_file = str(export_dir / "options.json"), str(export_dir / "weights.hdf5")
    other_words = ["<S>", "</S>", "<UNK>", "cat"]
    with pytest.raises(ConfigurationError, match="differs from the one given .* first at id"):
        TrainableBiLm(*read_bilm(options_file, weight_file), words=other_words)
    options = ElmoOptions.from_file(options_file)
    word_options = {"lstm": options.to_dict()["lstm"]}
    with pytest.raises(ConfigurationError, match="needs its vocabulary"):
        ElmoBiLm(ElmoOptions.from_dict(word_options), None, random_weights=True)
    with pytest.raises(ConfigurationError, match="lacks <UNK>"):
        TrainableBiLm(ElmoOptions.from_dict(word_options), None, words=["<S>", "</S>", "cat"])
    with pytest.raises(ConfigurationError, match="n_tokens_vocab 5, but the vocabulary has 4"):
        TrainableBiLm(ElmoOptions.from_dict(dict(word_options, n_tokens_vocab=5)), None, words=other_words)
    # Fine-tuning from the exported file with another vocabulary names the problem.
    with pytest.raises(ConfigurationError, match="differs from the one given"):
        ElmoBiLmModel(_vocabulary_of(other_words), options_file=options_file,
                      weight_file=weight_file, num_samples=2)


def _vocabulary_of(words):
    vocabulary = Vocabulary(non_padded_namespaces=["lm_tokens"], oov_token="<UNK>")
    for word in words:
        vocabulary.add_token_to_namespace(word, "lm_tokens")
    return vocabulary
