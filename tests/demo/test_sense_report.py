import h5py
import numpy
import pytest

from elmo_plugin.demo.corpus import GeneratedSentence
from elmo_plugin.demo.sense_report import (
    format_table,
    plot_senses,
    read_word_vectors,
    sense_similarities,
)

SENTENCES = [
    GeneratedSentence(("the", "bats", "fly"), "bats", 1, "animal"),
    GeneratedSentence(("bats", "sleep"), "bats", 0, "animal"),
    GeneratedSentence(("swing", "the", "bats"), "bats", 2, "sport"),
    GeneratedSentence(("wooden", "bats"), "bats", 1, "sport"),
]
# Layer 0: the same vector everywhere (context-free); layer 1: one direction per sense.
VECTORS = [
    numpy.array([[1.0, 1.0], [1.0, 0.0]]),
    numpy.array([[1.0, 1.0], [2.0, 0.0]]),
    numpy.array([[1.0, 1.0], [0.0, 1.0]]),
    numpy.array([[1.0, 1.0], [0.0, 3.0]]),
]


def test_similarities_within_and_across_senses():
    by_layer = {s.layer: s for s in sense_similarities(SENTENCES, VECTORS)}
    assert by_layer[0].within_sense == pytest.approx(1.0)
    assert by_layer[0].across_senses == pytest.approx(1.0)
    assert by_layer[1].within_sense == pytest.approx(1.0)
    assert by_layer[1].across_senses == pytest.approx(0.0)
    assert by_layer[1].separation == pytest.approx(1.0)
    table = format_table(sense_similarities(SENTENCES, VECTORS))
    assert "bats" in table and "layer 1" in table


def test_a_word_seen_in_one_sense_only_is_an_error():
    with pytest.raises(ValueError, match="two senses"):
        sense_similarities(SENTENCES[:2], VECTORS[:2])


def test_vectors_are_read_from_an_elmo_command_file_and_plotted(tmp_path):
    path = tmp_path / "vectors.hdf5"
    with h5py.File(path, "w") as handle:
        for index, sentence in enumerate(SENTENCES):
            layers = numpy.zeros((2, len(sentence.tokens), 2))
            layers[:, sentence.position] = VECTORS[index]
            handle.create_dataset(str(index), data=layers)
    vectors = read_word_vectors(str(path), SENTENCES)
    assert all(numpy.array_equal(a, b) for a, b in zip(vectors, VECTORS))
    with pytest.raises(ValueError, match="sentence 0 has 3 vectors for 4 tokens"):
        read_word_vectors(str(path), [GeneratedSentence(("a", "b", "c", "d"), "b", 1, "x")])
    picture = tmp_path / "senses.png"
    plot_senses(SENTENCES, vectors, str(picture), layers=(0, 1))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
