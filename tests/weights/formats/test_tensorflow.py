"""
The TensorFlow format: bilm-tf checkpoints and TF-Hub modules, imported exactly as bilm-tf's own
`dump_weights` exports them, computing bilm-tf's own vectors; every bad input named, nothing
half-written. The fixtures are TensorFlow's and bilm-tf's (tests/fixtures/tensorflow/).
"""
import json
import logging
import os
import shutil
import tarfile

import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.elmo import _ElmoBiLm as AllenNlpElmoBiLm

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.vocab_file import read_bilm_vocab_file
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.weights.conversion import convert_bilm
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.tensor_bundle import TensorBundle
from tests.helpers import BILM_VOCAB_FILE, TENSORFLOW_FIXTURES

CHECKPOINT = TENSORFLOW_FIXTURES / "bilm_tf_checkpoint"
SOURCES = {
    "save directory": CHECKPOINT,
    "prefix": CHECKPOINT / "model.ckpt-13",
    "index file": CHECKPOINT / "model.ckpt-13.index",
    "two shards": TENSORFLOW_FIXTURES / "sharded_checkpoint",
    "TF-Hub module": TENSORFLOW_FIXTURES / "hub_module",
}


def dump(path=TENSORFLOW_FIXTURES / "bilm_tf_dump.hdf5"):
    with h5py.File(path, "r") as handle:
        arrays = {}
        handle.visititems(lambda name, node: arrays.__setitem__(name, node[...]) if isinstance(node, h5py.Dataset) else None)
    return arrays


@pytest.mark.parametrize("source", list(SOURCES.values()), ids=list(SOURCES))
def test_imported_weights_are_bilm_tf_dump_weights(source, tmp_path):
    paths = convert_bilm(str(source), str(tmp_path / "out"))
    expected = dump()
    imported = dump(paths["weights"])
    assert set(imported) == set(expected)
    for name, array in expected.items():
        numpy.testing.assert_array_equal(imported[name], array, err_msg=name)
    options = json.loads(open(paths["options"]).read())
    assert options["char_cnn"]["n_characters"] == 262  # as AllenNLP expects; bilm-tf trains with 261


def test_imported_biLM_computes_bilm_tfs_own_vectors(tmp_path):
    # bilm-tf's BidirectionalLanguageModel on its own dump, one sentence per batch from zeros.
    paths = convert_bilm(str(SOURCES["save directory"]), str(tmp_path / "out"))
    sentences = json.loads((TENSORFLOW_FIXTURES / "sentences.json").read_text())
    ours = ElmoBiLm(paths["options"], paths["weights"])
    allennlps = AllenNlpElmoBiLm(paths["options"], paths["weights"])
    with h5py.File(TENSORFLOW_FIXTURES / "bilm_tf_vectors.hdf5", "r") as expected, torch.no_grad():
        for index, sentence in enumerate(sentences):
            for bilm in (ours, allennlps):
                layers = bilm(batch_to_ids([sentence]))["activations"]
                vectors = torch.stack([layer[0, 1:-1] for layer in layers]).numpy()
                numpy.testing.assert_allclose(vectors, expected[str(index)][...], atol=1e-6, rtol=0)


def test_options_come_from_the_save_directory_with_their_training_keys(tmp_path):
    paths = convert_bilm(str(CHECKPOINT), str(tmp_path / "out"))
    options = json.loads(open(paths["options"]).read())
    trained = json.loads((CHECKPOINT / "options.json").read_text())
    assert options["lstm"] == {**trained["lstm"], "cell_clip": 3.0, "proj_clip": 3.0}
    assert options["n_epochs"] == trained["n_epochs"] and options["unroll_steps"] == trained["unroll_steps"]


def test_a_module_without_options_takes_the_sizes_from_its_tensors(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        paths = convert_bilm(str(SOURCES["TF-Hub module"]), str(tmp_path / "hub"))
    assert "comes without its options" in caplog.text and "give its options file" in caplog.text
    options = json.loads(open(paths["options"]).read())
    trained = json.loads((CHECKPOINT / "options.json").read_text())
    assert options["char_cnn"]["filters"] == trained["char_cnn"]["filters"]
    assert options["char_cnn"]["n_highway"] == trained["char_cnn"]["n_highway"]
    assert options["lstm"]["dim"] == 16 and options["lstm"]["n_layers"] == 2
    # google/elmo's trained layer mix, for Elmo's scalar_mix_parameters.
    mix = json.loads(open(paths["scalar_mix"]).read())
    assert mix["scalar_mix_parameters"] == pytest.approx([0.1, 0.5, -0.3])
    assert mix["gamma"] == 1.25


def test_the_softmax_and_vocabulary_with_a_vocab_file(tmp_path):
    paths = convert_bilm(str(CHECKPOINT), str(tmp_path / "out"), vocabulary_file=BILM_VOCAB_FILE)
    assert sorted(paths) == ["options", "vocabulary", "weights"]
    assert read_bilm_vocab_file(paths["vocabulary"]) == read_bilm_vocab_file(BILM_VOCAB_FILE)
    bundle = TensorBundle(str(CHECKPOINT / "model.ckpt-13"), "checkpoint")
    with h5py.File(paths["weights"], "r") as weights:
        numpy.testing.assert_array_equal(weights["softmax/W"][...], bundle.tensor("lm/softmax/W"))
        numpy.testing.assert_array_equal(weights["softmax/b"][...], bundle.tensor("lm/softmax/b"))
    assert json.loads(open(paths["options"]).read())["softmax_in_weights"] is True


def test_fine_tuning_starts_from_the_trained_softmax_word_by_word(tmp_path):
    convert_bilm(str(CHECKPOINT), str(tmp_path / "out"), vocabulary_file=BILM_VOCAB_FILE)
    file_words = read_bilm_vocab_file(BILM_VOCAB_FILE)
    # Another order, and a word the checkpoint never saw.
    words = file_words[:3] + file_words[3:][::-1] + ["zebra"]
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("".join(f"{word}\n" for word in words))
    model = ElmoBiLmModel(BiLmVocabulary.from_bilm_corpus(vocab_file=str(vocab_file)),
                          weight_file=str(tmp_path / "out"), num_samples=8)
    bundle = TensorBundle(str(CHECKPOINT / "model.ckpt-13"), "checkpoint")
    trained_w, trained_b = bundle.tensor("lm/softmax/W"), bundle.tensor("lm/softmax/b")
    arrays = model.softmax_arrays()
    ours = {word: row for row, word in enumerate(arrays["vocabulary"])}
    for row, word in enumerate(file_words):
        numpy.testing.assert_array_equal(arrays["softmax/W"][ours[word]], trained_w[row], err_msg=word)
        assert arrays["softmax/b"][ours[word]] == trained_b[row]
    assert not any(numpy.array_equal(arrays["softmax/W"][ours["zebra"]], row) for row in trained_w)


def test_a_vocab_file_beside_the_checkpoint_is_read_and_a_wrong_one_refused(tmp_path):
    directory = shutil.copytree(CHECKPOINT, tmp_path / "checkpoint")
    shutil.copy(BILM_VOCAB_FILE, directory / "vocab.txt")
    assert read_bilm_weights(None, str(directory)).options.softmax_in_weights
    (directory / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nonly\n")
    with pytest.raises(ConfigurationError, match="has 4 words, but .*softmax has 32 rows"):
        read_bilm_weights(None, str(directory))


def test_a_word_input_checkpoint_needs_and_gets_its_vocabulary(tmp_path):
    source = str(TENSORFLOW_FIXTURES / "bilm_tf_word_checkpoint")
    with pytest.raises(ConfigurationError, match="word-input biLM: its vocabulary file is needed"):
        convert_bilm(source, str(tmp_path / "out"))
    paths = convert_bilm(source, str(tmp_path / "out"), vocabulary_file=BILM_VOCAB_FILE)
    imported, expected = dump(paths["weights"]), dump(TENSORFLOW_FIXTURES / "bilm_tf_word_dump.hdf5")
    for name, array in expected.items():
        numpy.testing.assert_array_equal(imported[name], array, err_msg=name)
    ElmoBiLm(paths["options"], paths["weights"])(batch_to_ids([["the", "cat"]]))


def test_a_checkpoint_copied_from_another_machine_is_found():
    # Its `checkpoint` file names the absolute path where bilm-tf trained it, long gone.
    assert not os.path.exists(open(CHECKPOINT / "checkpoint").readline().split('"')[1])
    read_bilm_weights(None, str(CHECKPOINT))


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"char_cnn.n_highway": 1}, r"holds 'lm/CNN_high_1/W_carry'.* do not describe"),
        ({"char_cnn.filters": [[1, 4], [3, 8], [3, 8]]}, r"variable 'lm/CNN/W_cnn_1' has shape \(1, 2, 4, 8\), but .* require \(1, 3, 4, 8\)"),
        ({"lstm.n_layers": 3}, r"has no variable for 'RNN_0/RNN/MultiRNNCell/Cell2/LSTMCell/W_0'"),
    ],
)
def test_options_of_another_architecture_are_refused(tmp_path, change, expected):
    options = json.loads((CHECKPOINT / "options.json").read_text())
    for dotted, value in change.items():
        section, key = dotted.split(".")
        options[section][key] = value
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError, match=expected):
        convert_bilm(str(CHECKPOINT), str(tmp_path / "out"), options_file=str(options_file))
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_of_another_model_names_what_it_holds(tmp_path):
    with pytest.raises(ConfigurationError) as error:
        convert_bilm(str(TENSORFLOW_FIXTURES / "not_a_bilm"), str(tmp_path / "out"))
    message = str(error.value)
    assert "not a biLM in bilm-tf's variable layout" in message and "dense/kernel" in message
    assert "CNN/W_cnn_i" in message and "lstm_cell/{kernel,bias,projection/kernel}" in message
    assert not (tmp_path / "out").exists()


def test_a_damaged_checkpoint_writes_nothing(tmp_path):
    directory = shutil.copytree(CHECKPOINT, tmp_path / "checkpoint")
    data = directory / "model.ckpt-13.data-00000-of-00001"
    entry = TensorBundle(str(directory / "model.ckpt-13"), "x").entries["lm/RNN_1/rnn/multi_rnn_cell/cell_1/lstm_cell/kernel"]
    content = bytearray(data.read_bytes())
    content[entry.offset] ^= 1
    data.write_bytes(bytes(content))
    with pytest.raises(ConfigurationError, match="lstm_cell/kernel' fails its crc32c check"):
        convert_bilm(str(directory), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_several_checkpoints_without_a_state_file_ask_which(tmp_path):
    directory = shutil.copytree(TENSORFLOW_FIXTURES / "sharded_checkpoint", tmp_path / "checkpoints")
    (directory / "checkpoint").unlink()
    for name in os.listdir(directory):
        shutil.copy(directory / name, directory / name.replace("ckpt-13", "ckpt-26"))
    with pytest.raises(ConfigurationError, match=r"several TensorFlow checkpoints \(model.ckpt-13, model.ckpt-26\)"):
        read_bilm_weights(None, str(directory))
    read_bilm_weights(None, str(directory / "model.ckpt-26"))


def test_a_tf_hub_download_as_its_tarball(tmp_path, cache_directory):
    # tfhub.dev served modules as .tar.gz of the module directory's contents.
    tarball = tmp_path / "elmo_3.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        for name in os.listdir(SOURCES["TF-Hub module"]):
            archive.add(SOURCES["TF-Hub module"] / name, name)
    paths = convert_bilm(str(tarball), str(tmp_path / "out"))
    expected = dump()
    imported = dump(paths["weights"])
    for name, array in expected.items():
        numpy.testing.assert_array_equal(imported[name], array, err_msg=name)


@pytest.mark.parametrize("made_by, module, weights, gamma", [
    ("google", "hub_module", [0.1, 0.5, -0.3], 1.25),
    ("deeppavlov", "deeppavlov_module", [0.4, -0.2, 0.7], 0.8),
])
def test_a_tf_hub_modules_elmo_and_default_outputs(tmp_path, made_by, module, weights, gamma):
    # TensorFlow's own outputs of the module (make_fixtures.py: carried state, one sentence a run).
    from elmo_plugin import ElmoEmbedder
    from elmo_plugin.inference.output_vectors import LayerMix

    paths = convert_bilm(str(TENSORFLOW_FIXTURES / module), str(tmp_path / "imported"))
    mix = json.loads(open(paths["scalar_mix"]).read())
    assert mix["scalar_mix_parameters"] == pytest.approx(weights) and mix["gamma"] == pytest.approx(gamma)
    assert mix["made_by"] == made_by
    sentences = json.loads((TENSORFLOW_FIXTURES / "sentences.json").read_text())
    token_embedder = ElmoEmbedder(weight_file=str(TENSORFLOW_FIXTURES / module), stateful=True)
    sentence_embedder = ElmoEmbedder(paths["options"], paths["weights"], stateful=True)
    layer_mix = LayerMix.parse(paths["scalar_mix"])
    with h5py.File(TENSORFLOW_FIXTURES / "hub_outputs.hdf5", "r") as expected:
        for index, sentence in enumerate(sentences):
            elmo = layer_mix.apply(token_embedder.embed_sentence(sentence))
            numpy.testing.assert_allclose(elmo, expected[f"{made_by}/elmo/{index}"][...], atol=2e-6, rtol=0)
            (default,) = sentence_embedder.embed_batch_sentence_vectors([sentence], "mean", "mix", paths["scalar_mix"])
            # google's `default` is the mean of `elmo`; DeepPavlov's leaves gamma out.
            scale = 1.0 if made_by == "google" else gamma
            numpy.testing.assert_allclose(default / scale, expected[f"{made_by}/default/{index}"][...], atol=2e-6, rtol=0)
