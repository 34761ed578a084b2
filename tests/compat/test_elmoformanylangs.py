"""
ELMoForManyLangs models, natively: a model made by ELMoForManyLangs' own code
(`tests/fixtures/elmoformanylangs_model.py`) embedded by its `Embedder.sents2elmo` (the oracle)
and by ours, with carried state as it has and deterministically as we offer.
"""
import logging
import subprocess
import sys

import h5py
import numpy
import pytest
import torch
from allennlp.common import Params
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin import Elmo, ElmoBiLm, ElmoEmbedder, batch_to_ids
from tests.fixtures.elmoformanylangs_model import import_elmoformanylangs, make_model
from tests.helpers import REPO_ROOT

# Latin, Cyrillic and CJK; an unknown character (Ω, ё); tokens of more than 48 characters, and
# of more than 48 UTF-8 bytes in fewer characters; the literal tokens <bos> and <eos>.
SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["кошка", "сидит", "на", "ковре", "ёж"],
    ["我们", "是", "学生"],
    ["Ωmega", "x" * 60, "日本語" * 10, "东京"],
    ["<bos>", "cat", "<eos>"],
    ["a"],
]
TOLERANCE = 1e-6  # float32 rounding at these magnitudes


@pytest.fixture(scope="module", params=[{"word_dim": 6}, {"word_dim": 0, "legacy_pickle": True}],
                ids=["with word vectors, zip pickles", "characters only, legacy pickles"])
def model_directory(request, tmp_path_factory):
    return make_model(str(tmp_path_factory.mktemp("elmoformanylangs") / "model"), **request.param)


def their_embedder(directory):
    return import_elmoformanylangs().Embedder(directory, batch_size=64)


def in_their_order(sentences):
    """sents2elmo batches sentences longest first (a stable sort): the rows carry state so."""
    return sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))


def reduce(layers: numpy.ndarray, output_layer: int) -> numpy.ndarray:
    return {-1: layers.mean(axis=0), -2: layers}.get(output_layer, layers[output_layer] if output_layer >= 0 else None)


def test_carried_state_equals_theirs_for_every_output_layer(model_directory):
    theirs = their_embedder(model_directory)
    ours = ElmoEmbedder(weight_file=model_directory, stateful=True)
    order = in_their_order(SENTENCES)
    # Each call continues the carried state, on both sides.
    for output_layer in (-2, -1, 0, 1, 2):
        expected = theirs.sents2elmo(SENTENCES, output_layer=output_layer)
        layers = ours.embed_batch([SENTENCES[i] for i in order])
        for row, index in enumerate(order):
            actual = reduce(layers[row], output_layer)
            assert actual.shape == expected[index].shape
            numpy.testing.assert_allclose(actual, expected[index], rtol=0, atol=TOLERANCE, err_msg=str(SENTENCES[index]))


def test_deterministic_mode_is_their_model_started_from_our_fixed_point(model_directory):
    theirs = their_embedder(model_directory)
    ours = ElmoEmbedder(weight_file=model_directory)  # stateful=False
    fixed_state, fixed_memory = ours.elmo_bilm.start_state()
    order = in_their_order(SENTENCES)
    for _ in range(2):  # the same vectors again: nothing carried
        theirs.model.encoder._states = (
            fixed_state.expand(-1, len(SENTENCES), -1).clone(),
            fixed_memory.expand(-1, len(SENTENCES), -1).clone(),
        )
        expected = theirs.sents2elmo(SENTENCES, output_layer=-2)
        actual = ours.embed_batch(SENTENCES)
        for index in order:
            numpy.testing.assert_allclose(actual[index], expected[index], rtol=0, atol=TOLERANCE)


def test_elmo_and_the_token_embedder_read_the_standard_character_ids(model_directory, caplog):
    # Through batch_to_ids (the indexer's ids) tokens keep 48 UTF-8 bytes; up to that they are
    # encoded exactly as through ElmoEmbedder's whole-token ids.
    short = [sentence for sentence in SENTENCES if all(len(token.encode()) <= 48 for token in sentence)]
    embedder = ElmoEmbedder(weight_file=model_directory)
    elmo = Elmo(None, model_directory, 1, dropout=0.0, stateful=False, scalar_mix_parameters=[0.0, 1.0, 2.0])
    with torch.no_grad():
        output = elmo(batch_to_ids(short))
    weights = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0).numpy()
    for row, sentence in enumerate(short):
        expected = numpy.tensordot(weights, embedder.embed_sentence(sentence), axes=1)
        numpy.testing.assert_allclose(output["elmo_representations"][0][row, : len(sentence)].numpy(),
                                      expected, rtol=0, atol=1e-5)
    # A token cut at 48 bytes is said once.
    with caplog.at_level(logging.WARNING), torch.no_grad():
        elmo(batch_to_ids([["日本語" * 10]]))
        elmo(batch_to_ids([["日本語" * 10]]))
    assert caplog.text.count("Tokens longer than 48 UTF-8 bytes") == 1
    token_embedder = TokenEmbedder.from_params(Params({"type": "elmo_token_embedder", "weight_file": model_directory}))
    assert token_embedder(batch_to_ids(short)).shape == (len(short), 7, 16)


def test_allennlp_elmo_takes_the_model_directory(model_directory, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(" ".join(sentence) for sentence in SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.hdf5"
    completed = subprocess.run(
        [sys.executable, "-m", "elmo_plugin", "elmo", str(text), str(output), "--all", "--deterministic",
         "--weight-file", model_directory],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    embedder = ElmoEmbedder(weight_file=model_directory)
    with h5py.File(output, "r") as handle:
        for index, sentence in enumerate(SENTENCES):
            numpy.testing.assert_allclose(handle[str(index)][...], embedder.embed_sentence(sentence),
                                          rtol=0, atol=TOLERANCE)


def test_converted_once_into_our_layout_it_computes_the_same(model_directory, tmp_path):
    from elmo_plugin.weights.conversion import convert_bilm

    paths = convert_bilm(model_directory, str(tmp_path / "converted"))
    ids = ElmoBiLm(None, model_directory).character_ids(SENTENCES)
    with torch.no_grad():
        original = ElmoBiLm(None, model_directory, stateful=False)(ids)["activations"]
        converted = ElmoBiLm(paths["options"], paths["weights"], stateful=False)(ids)["activations"]
    for a, b in zip(original, converted):
        assert torch.equal(a, b)


def test_fine_tuning_starts_from_the_model_and_exports_it_in_our_layout(tmp_path):
    import json

    from allennlp.commands.train import train_model_from_file

    from elmo_plugin.models.export import export_bilm
    from tests.helpers import BILM_CONFIGS, bilm_data_overrides

    directory = make_model(str(tmp_path / "model"))
    start = ElmoBiLm(None, directory).weight_arrays()
    model = train_model_from_file(
        str(BILM_CONFIGS / "fine_tune.jsonnet"),
        str(tmp_path / "tuned"),
        overrides=bilm_data_overrides(**{
            "model.options_file": None, "model.weight_file": directory, "model.num_samples": 8,
            "model.dropout": 0.0, "vocabulary": {"type": "bilm", "min_count": 1},
            "dataset_reader.num_streams": 2, "validation_dataset_reader.num_streams": 2,
            "data_loader.batch_size": 2, "trainer.num_epochs": 1,
        }),
    )
    assert numpy.isfinite(json.loads((tmp_path / "tuned" / "metrics.json").read_text())["validation_perplexity"])
    tuned = model.bilm.weight_arrays()
    assert not numpy.array_equal(tuned["CNN_proj/W_proj"], start["CNN_proj/W_proj"])  # it trained
    assert list(tuned["char_vocabulary"]) == list(start["char_vocabulary"])
    paths = export_bilm(str(tmp_path / "tuned"), str(tmp_path / "exported"))
    exported = ElmoBiLm(paths["options"], paths["weights"], stateful=False).double()
    bilm = model.bilm.double().eval()
    bilm.stateful = False
    ids = exported.character_ids(SENTENCES)
    with torch.no_grad():
        for ours, theirs in zip(exported(ids)["activations"], bilm(ids)["activations"]):
            assert (ours - theirs).abs().max() <= 1e-9


def test_carried_state_through_literal_boundaries_and_an_all_empty_batch_equals_theirs(model_directory):
    # Their code reads the text <S> and </S> as characters (only its own <bos>/<eos> are
    # boundaries), and reads <bos> <eos> for every empty sentence, even in an all-empty batch.
    theirs = their_embedder(model_directory)
    ours = ElmoEmbedder(weight_file=model_directory, stateful=True)
    batches = [[["<S>", "cat", "</S>"], ["a", "</S>", "b"]], [[], []], [["the", "<S>"], ["x"]]]
    for batch in batches:
        expected = theirs.sents2elmo(batch, output_layer=-2)
        order = in_their_order(batch)
        layers = ours.embed_batch([batch[i] for i in order])
        for row, index in enumerate(order):
            assert layers[row].shape == expected[index].shape
            numpy.testing.assert_allclose(layers[row], expected[index], rtol=0, atol=TOLERANCE, err_msg=str(batch))
