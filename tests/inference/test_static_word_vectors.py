import h5py
import numpy
import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.token_embedders.embedding import _read_pretrained_embeddings_file

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.inference.static_word_vectors import HDF5_DATASET, write_token_vectors
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

WORDS = ["<S>", "</S>", "<UNK>", "bats", "Bats", "über", "x" * 60, "."]


def write_vocabulary(tmp_path, text):
    path = tmp_path / "vocab.txt"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_vectors_are_layer_0_of_the_bilm_in_both_formats(tmp_path):
    vocabulary_file = write_vocabulary(tmp_path, "".join(f"{word}\n" for word in WORDS))
    paths = write_token_vectors(
        vocabulary_file, str(tmp_path / "out" / "vectors"), ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE
    )
    with h5py.File(paths["hdf5"], "r") as handle:
        vectors = handle[HDF5_DATASET][...]
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    words = [w for w in WORDS if w not in ("<S>", "</S>")]  # the biLM adds those itself
    layer_0 = bilm(batch_to_ids([words]))["activations"][0][0, 1:-1]
    expected = layer_0[:, : vectors.shape[1]].detach().numpy()
    rows = [WORDS.index(w) for w in words]
    numpy.testing.assert_allclose(vectors[rows], expected, atol=1e-6)
    # The text format is an AllenNLP `embedding` pretrained_file.
    vocabulary = Vocabulary()
    vocabulary.add_tokens_to_namespace(["bats", "über", "unseen"], "tokens")
    weight = _read_pretrained_embeddings_file(paths["text"], vectors.shape[1], vocabulary)
    index = vocabulary.get_token_index("über")
    numpy.testing.assert_allclose(weight[index].numpy(), vectors[WORDS.index("über")], atol=1e-7)
    with open(paths["text"], encoding="utf-8") as handle:
        assert handle.readline() == f"{len(WORDS)} {vectors.shape[1]}\n"


def test_bad_vocabularies_and_existing_outputs_are_refused(tmp_path):
    prefix = str(tmp_path / "vectors")
    for text, message in [
        ("a\n\nb\n", r"word list .*vocab.txt, line 2: blank line"),
        ("a\nb\na\n", "line 3: 'a' already appears on line 1"),
        ("", "holds no words"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            write_token_vectors(
                write_vocabulary(tmp_path, text), prefix, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE
            )
    vocabulary_file = write_vocabulary(tmp_path, "a\nb\n")
    write_token_vectors(vocabulary_file, prefix, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    with pytest.raises(ConfigurationError, match="already exist.*--overwrite"):
        write_token_vectors(vocabulary_file, prefix, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    write_token_vectors(vocabulary_file, prefix, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, overwrite=True)
