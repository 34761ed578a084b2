"""
`allennlp elmo --dtype float16 --compression gzip|gzip:LEVEL|lzf`: smaller files that read back
as they are (h5py decompresses; float16 within its rounding of float32), in every mode (long
sentences in segments, shards, workers, --resume), bad values refused before any work.
"""
import h5py
import numpy
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
from elmo_plugin.inference.embed_file_options import EmbedFileOptions
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, read_hdf5
from tests.inference.test_embed_file import EmbedFileTestCase, interrupt_after

# A blank line (an empty dataset), short lines and one far longer than a budget of 32.
LINES = ["The cat sat on the mat .", "", "A dog", " ".join(f"w{j % 17}" for j in range(90)), "x y z"]


def embedder(max_tokens_per_batch=32):
    return ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, max_tokens_per_batch=max_tokens_per_batch)


class TestDtypeAndCompression(EmbedFileTestCase):
    def embed_with(self, name, **options):
        path = self.write_input(LINES)
        return self.embed(path, name, embedder=embedder(), allow_empty_lines=True, chunk_size=2, **options)

    @pytest.mark.parametrize("dtype, compression, filter_name", [
        ("float16", None, None), ("float32", "gzip", "gzip"), ("float16", "gzip:9", "gzip"), ("float16", "lzf", "lzf"),
    ])
    def test_the_file_reads_back_as_float32_would(self, dtype, compression, filter_name):
        expected = read_hdf5(self.embed_with("float32.hdf5"))
        output = self.embed_with("small.hdf5", dtype=dtype, compression=compression)
        with h5py.File(output, "r") as handle:
            for key in ("0", "3"):
                assert handle[key].dtype == numpy.dtype(dtype)
                assert handle[key].compression == filter_name
            assert handle["1"].shape == (3, 0, 32)  # the blank line
            if compression == "gzip:9":
                assert handle["0"].compression_opts == 9
        actual = read_hdf5(output)
        assert set(actual) == set(expected)
        for key, value in expected.items():
            if key == "sentence_to_index":
                assert actual[key] == value
            elif dtype == "float32":
                numpy.testing.assert_array_equal(actual[key], value)
            else:  # float16: within its rounding of the float32 vectors
                numpy.testing.assert_allclose(actual[key].astype(numpy.float32), value, rtol=2**-10, atol=2**-14)

    def test_shards_keep_the_dtype_and_the_filter(self):
        output = self.embed_with("sharded.hdf5", dtype="float16", compression="gzip", shard_size=2000)
        expected = read_hdf5(self.embed_with("whole.hdf5", dtype="float16", compression="gzip"))
        with h5py.File(output, "r") as handle:
            assert handle["3"].dtype == numpy.float16 and handle["3"].compression == "gzip"
        actual = read_hdf5(output)
        for key, value in expected.items():
            if key != "sentence_to_index":
                numpy.testing.assert_array_equal(actual[key], value)

    @pytest.mark.parametrize("changed", [{"dtype": "float32"}, {"compression": None}, {"compression": "gzip:1"}])
    def test_a_resumed_run_refuses_another_dtype_or_compression(self, changed):
        path = self.write_input(LINES)
        output = str(self.TEST_DIR / "out.hdf5")
        interrupted = embedder()
        interrupt_after(interrupted, 1)
        first = dict(dtype="float16", compression="gzip", allow_empty_lines=True, chunk_size=2)
        with pytest.raises(KeyboardInterrupt):
            interrupted.embed_file(path, output, **first)
        with pytest.raises(ConfigurationError, match=f"started with different {next(iter(changed))}"):
            embedder().embed_file(path, output, resume=True, **dict(first, **changed))
        embedder().embed_file(path, output, resume=True, **first)
        expected = read_hdf5(self.embed_with("uninterrupted.hdf5", dtype="float16", compression="gzip"))
        actual = read_hdf5(output)
        for key, value in expected.items():
            if key != "sentence_to_index":
                numpy.testing.assert_array_equal(actual[key], value)


@pytest.mark.parametrize("options, message", [
    ({"dtype": "int8"}, "dtype must be one of ('float32', 'float16'), got 'int8'"),
    ({"compression": "zstd"}, "compression must be gzip, gzip:LEVEL (LEVEL 0-9) or lzf, got 'zstd'"),
    ({"compression": "gzip:12"}, "compression must be gzip, gzip:LEVEL (LEVEL 0-9) or lzf, got 'gzip:12'"),
    ({"compression": "lzf:3"}, "got 'lzf:3'"),
])
def test_bad_values_are_refused_before_any_work(options, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EmbedFileOptions(**options)
