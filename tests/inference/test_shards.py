"""A sharded output: shards beside OUTPUT, which links to them and reads as the one file would."""
import json
import os

import h5py
import numpy
import pytest

from elmo_plugin.inference import hdf5_output
from tests.helpers import read_hdf5
from tests.inference.test_embed_file import EmbedFileTestCase, interrupt_after
from tests.inference.test_long_sentences import LINES, embedder


class TestShardedOutput(EmbedFileTestCase):
    def test_shards_read_as_one_file_from_anywhere(self, monkeypatch):
        path = self.write_input(LINES)
        expected = read_hdf5(self.embed(path, "whole.hdf5", chunk_size=8))
        output = self.embed(path, "out.hdf5", chunk_size=8, shard_size=20_000)
        shards = sorted(name for name in os.listdir(self.TEST_DIR) if name.startswith("out-"))
        assert len(shards) > 3 and shards[0] == "out-00000.hdf5"
        monkeypatch.chdir("/")  # links resolve next to OUTPUT, not in the working directory
        with h5py.File(output, "r") as handle:
            assert json.loads(handle.attrs["shards"]) == shards
            assert set(handle) == set(expected)
            for key, value in expected.items():
                if key == "sentence_to_index":
                    assert handle[key][0].decode() == value[0].decode()
                else:
                    assert numpy.array_equal(handle[key][...], value), key
        for name in shards:  # each about the size asked for (a dataset is never split)
            assert os.path.getsize(self.TEST_DIR / name) < 20_000 + 250_000

    def test_overwriting_with_fewer_shards_removes_the_others(self):
        path = self.write_input(LINES)
        self.embed(path, chunk_size=8, shard_size=20_000)
        self.embed(path, chunk_size=8, shard_size=10**9, overwrite=True)
        assert sorted(name for name in os.listdir(self.TEST_DIR) if name.startswith("out")) == [
            "out-00000.hdf5", "out.hdf5"]

    def test_an_interrupted_sharded_run_resumes(self):
        path = self.write_input(LINES)
        expected = read_hdf5(self.embed(path, "whole.hdf5", chunk_size=8))
        interrupted = embedder()
        interrupt_after(interrupted, 2)
        with pytest.raises(KeyboardInterrupt):
            self.embed(path, embedder=interrupted, chunk_size=8, shard_size=20_000)
        assert not any(name.startswith("out-") for name in os.listdir(self.TEST_DIR))
        self.embed(path, embedder=embedder(), chunk_size=8, shard_size=20_000, resume=True)
        actual = read_hdf5(self.TEST_DIR / "out.hdf5")
        assert all(numpy.array_equal(actual[key], expected[key]) for key in expected if key != "sentence_to_index")

    def test_large_datasets_are_merged_slice_by_slice(self, monkeypatch):
        # A block smaller than one sentence's vectors takes the sliced copy for every dataset.
        path = self.write_input(LINES)
        expected = read_hdf5(self.embed(path, "whole.hdf5", chunk_size=8))
        monkeypatch.setattr(hdf5_output, "_COPY_BLOCK_BYTES", 1000)
        sliced = read_hdf5(self.embed(path, "sliced.hdf5", chunk_size=8, output_format="all"))
        for key, value in expected.items():
            if key != "sentence_to_index":
                assert numpy.array_equal(sliced[key], value), key
        top = read_hdf5(self.embed(path, "top.hdf5", chunk_size=8, output_format="top"))
        assert all(numpy.array_equal(top[key], expected[key][-1]) for key in expected if key != "sentence_to_index")
