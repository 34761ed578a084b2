"""
Property tests of the inference layer: `ElmoEmbedder` on any tokenized sentences, and the
file engine on any input bytes (a clear error naming the file, or one entry per line).
"""
import os
import tempfile

import h5py
import numpy
from allennlp.common.checks import ConfigurationError
from hypothesis import given, settings
from hypothesis import strategies as st

from elmo_plugin import ElmoEmbedder
from elmo_plugin.inference.embed_file import embed_file
from elmo_plugin.inference.embed_file_options import EmbedFileOptions
from tests.data.test_properties import ANY_TEXT, TEXT_LIKE_BYTES
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

EMBEDDER = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
OUTPUT_DIM = 2 * EMBEDDER.elmo_bilm.options.projection_dim


@settings(max_examples=60)
@given(st.lists(st.lists(ANY_TEXT | st.sampled_from(["<S>", "</S>", "", " ", "x" * 200]), max_size=7), max_size=4))
def test_any_tokens_embed_to_finite_vectors_of_the_right_shape(batch):
    vectors = EMBEDDER.embed_batch(batch)
    assert len(vectors) == len(batch)
    for sentence, sentence_vectors in zip(batch, vectors):
        assert sentence_vectors.shape == (3, len(sentence), OUTPUT_DIM)
        assert numpy.isfinite(sentence_vectors).all()


@settings(max_examples=40)
@given(TEXT_LIKE_BYTES, st.booleans())
def test_the_file_engine_on_any_bytes(content, allow_empty_lines):
    with tempfile.TemporaryDirectory() as directory:
        input_path = os.path.join(directory, "input.txt")
        output_path = os.path.join(directory, "output.hdf5")
        with open(input_path, "wb") as handle:
            handle.write(content)
        try:
            embed_file(EMBEDDER, input_path, output_path,
                       EmbedFileOptions(batch_size=3, chunk_size=4, allow_empty_lines=allow_empty_lines))
        except ConfigurationError as error:
            assert input_path in str(error), str(error)
            assert not os.path.exists(output_path)
            return
        lines = content.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the end of the last line
        with h5py.File(output_path, "r") as output:
            for index, line in enumerate(lines):
                tokens = line.decode("utf-8").split()
                assert output[str(index)].shape[:2] == (3, len(tokens)), (index, line)
        assert sorted(os.listdir(directory)) == ["input.txt", "output.hdf5"]
