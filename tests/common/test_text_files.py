"""
A UTF-8 byte-order mark at the start of a text file is a marker, not text, in every text input:
the file to embed, a training corpus, a vocabulary, a word list, an options file (the
ELMoForManyLangs dictionaries: tests/weights/formats/test_elmoformanylangs.py).
"""
import json

import h5py
import numpy
import pytest
from allennlp.data import Vocabulary

from elmo_plugin import ElmoEmbedder
from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.vocab_file import read_bilm_vocab_file
from elmo_plugin.inference.static_word_vectors import write_token_vectors
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, fixture_options

BOM = b"\xef\xbb\xbf"


def test_the_embedding_input(tmp_path):
    text = "The cat sat .\nA dog\n".encode()
    (tmp_path / "plain.txt").write_bytes(text)
    (tmp_path / "bom.txt").write_bytes(BOM + text)
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    for name in ("plain", "bom"):
        embedder.embed_file(str(tmp_path / f"{name}.txt"), str(tmp_path / f"{name}.hdf5"))
    with h5py.File(tmp_path / "plain.hdf5", "r") as plain, h5py.File(tmp_path / "bom.hdf5", "r") as bom:
        assert numpy.array_equal(plain["0"][...], bom["0"][...])
        assert json.loads(bom["sentence_to_index"][0])["The cat sat ."] == "0"


def test_the_training_corpus_and_its_vocabulary(tmp_path):
    (tmp_path / "corpus.txt").write_bytes(BOM + "neural nets learn\nnets learn words\n".encode())
    reader = BiLmCorpusReader(window_size=3, num_streams=1, shuffle=False)
    instances = list(reader.read(str(tmp_path / "corpus.txt")))
    vocabulary = Vocabulary.from_instances(instances)
    words = set(vocabulary.get_token_to_index_vocabulary("lm_targets") or vocabulary.get_token_to_index_vocabulary())
    assert not any("\ufeff" in word for namespace in vocabulary._token_to_index
                   for word in vocabulary.get_token_to_index_vocabulary(namespace))
    assert words


@pytest.mark.parametrize("require_special_tokens", [True, False])
def test_vocabulary_files_and_word_lists(tmp_path, require_special_tokens):
    (tmp_path / "vocab.txt").write_bytes(BOM + "<S>\n</S>\n<UNK>\nthe\n".encode())
    assert read_bilm_vocab_file(str(tmp_path / "vocab.txt"), require_special_tokens)[0] == "<S>"


def test_token_vector_word_lists(tmp_path):
    (tmp_path / "words.txt").write_bytes(BOM + "the\ncat\n".encode())
    paths = write_token_vectors(str(tmp_path / "words.txt"), str(tmp_path / "vectors"), ELMO_OPTIONS_FILE,
                                ELMO_WEIGHT_FILE)
    assert open(paths["text"], encoding="utf-8").read().split("\n")[1].split()[0] == "the"


def test_options_files(tmp_path):
    (tmp_path / "options.json").write_bytes(BOM + json.dumps(fixture_options()).encode())
    assert ElmoOptions.from_file(str(tmp_path / "options.json")) == ElmoOptions.from_file(ELMO_OPTIONS_FILE)
