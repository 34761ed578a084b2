"""
flair's `ELMoEmbeddings` (flair 0.15, pinned), unchanged: it imports `allennlp.commands.elmo`,
which this package serves. A small tagger with the fixture biLM embeds, trains an epoch, is
saved and loaded back; its vectors are `ElmoEmbedder`'s.
"""
import importlib

import numpy
import pytest
import torch

from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

TAGGED = [
    [("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")],
    [("A", "DT"), ("dog", "NN"), ("barked", "VBD")],
    [("Dogs", "NNS"), ("bark", "VBP"), (".", ".")],
    [("The", "DT"), ("bats", "NNS"), ("hang", "VBP"), ("upside", "RB"), ("down", "RB")],
]


@pytest.fixture
def flair(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAIR_CACHE_ROOT", str(tmp_path / "flair_cache"))
    flair = importlib.import_module("flair")
    monkeypatch.setattr(flair, "cache_root", tmp_path / "flair_cache")
    monkeypatch.setattr(flair, "device", torch.device("cpu"))
    return flair


def sentences(flair):
    from flair.data import Sentence

    result = []
    for tagged in TAGGED:
        sentence = Sentence([word for word, _ in tagged])
        for token, (_, tag) in zip(sentence, tagged):
            token.add_label("pos", tag)
        result.append(sentence)
    return result


def test_flairs_elmo_embeddings_are_the_0_9_embedders_vectors(flair):
    from flair.embeddings import ELMoEmbeddings

    from elmo_plugin.compat.allennlp_commands_elmo import ElmoEmbedder

    embeddings = ELMoEmbeddings(options_file=ELMO_OPTIONS_FILE, weight_file=ELMO_WEIGHT_FILE)
    assert isinstance(embeddings.ee, ElmoEmbedder) and embeddings.embedding_length == 3 * 32
    batch = sentences(flair)
    embeddings.embed(batch)
    # The same calls on our embedder: flair embeds a dummy "hello" first, then the batch.
    ours = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    ours.embed_batch([["hello"]])
    expected = ours.embed_batch([[token.text for token in sentence] for sentence in batch])
    for sentence, layers in zip(batch, expected):
        for position, token in enumerate(sentence):
            numpy.testing.assert_allclose(
                token.get_embedding().numpy(), layers[:, position].reshape(-1), rtol=0, atol=1e-6
            )


def test_a_tagger_with_elmo_trains_saves_and_loads(flair, tmp_path):
    from flair.data import Corpus, Sentence
    from flair.embeddings import ELMoEmbeddings
    from flair.models import SequenceTagger
    from flair.trainers import ModelTrainer

    data = sentences(flair)
    corpus = Corpus(train=data, dev=data[:2], test=data[2:])
    tagger = SequenceTagger(
        hidden_size=8,
        embeddings=ELMoEmbeddings(options_file=ELMO_OPTIONS_FILE, weight_file=ELMO_WEIGHT_FILE),
        tag_dictionary=corpus.make_label_dictionary("pos", add_unk=True),
        tag_type="pos",
        use_crf=False,
    )
    before = [parameter.detach().clone() for parameter in tagger.parameters()]
    ModelTrainer(tagger, corpus).train(
        str(tmp_path / "tagger"), max_epochs=1, mini_batch_size=2, learning_rate=0.1,
        use_final_model_for_eval=True, save_final_model=False, create_file_logs=False,
    )
    assert any(not torch.equal(a, b) for a, b in zip(before, tagger.parameters()))
    # flair 0.15's own `save` serializes embeddings through `to_params`, which its legacy
    # `ELMoEmbeddings` lacks (flair issue 3401), whatever computes the vectors; flair up to 0.11
    # pickled the whole model, as here, and flair's `__setstate__` moves our biLM and its
    # carried state (`elmo_bilm._elmo_lstm._states`) on loading.
    with pytest.raises(NotImplementedError):
        tagger.save(tmp_path / "flair-save.pt")
    torch.save(tagger, tmp_path / "tagger.pt")
    loaded = torch.load(tmp_path / "tagger.pt", weights_only=False)
    assert type(loaded.embeddings).__name__ == "ELMoEmbeddings"
    sentence, reference = Sentence("The cat barked ."), Sentence("The cat barked .")
    loaded.predict(sentence)
    tagger.predict(reference)
    assert [t.get_label("pos").value for t in sentence] == [t.get_label("pos").value for t in reference]
    loaded.embeddings.embed(sentence)
    assert sentence[0].get_embedding().shape == (96,) and torch.isfinite(sentence[0].get_embedding()).all()
