"""
The file engine under bad input and faults: a resumed run that would mix models, bad chunk
sizes, damaged chunks, paths that would destroy data, a second writer, kill -9, a full disk.
"""
import os
import signal
import subprocess
import sys
import time

import filelock
import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
from elmo_plugin.weights.random_weights import write_random_elmo
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT, fixture_options
from tests.inference.test_embed_file import SENTENCES, EmbedFileTestCase, interrupt_after, read_hdf5

LINES = [" ".join(f"w{j}" for j in range(1 + (i * 7) % 11)) for i in range(40)]


class TestResumeRefusesToMix(EmbedFileTestCase):
    def interrupted_run(self, **options):
        path = self.write_input(LINES)
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        interrupt_after(embedder, 3)
        with pytest.raises(KeyboardInterrupt):
            self.embed(path, embedder=embedder, batch_size=4, chunk_size=8, **options)
        return path

    def test_another_model(self):
        path = self.interrupted_run()
        other_options, other_weights = write_random_elmo(self.TEST_DIR / "other", fixture_options(), seed=3)
        other = ElmoEmbedder(other_options, other_weights)
        with pytest.raises(ConfigurationError, match="started with different model .*--overwrite"):
            self.embed(path, embedder=other, resume=True, batch_size=4, chunk_size=8)

    def test_another_precision(self):
        path = self.interrupted_run()
        reduced = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, precision="bfloat16")
        with pytest.raises(ConfigurationError, match="started with different precision"):
            self.embed(path, embedder=reduced, resume=True, batch_size=4, chunk_size=8)

    def test_the_same_model_from_another_place_resumes(self):
        path = self.interrupted_run()
        directory = self.TEST_DIR / "model"
        directory.mkdir()
        (directory / "options.json").write_bytes(open(ELMO_OPTIONS_FILE, "rb").read())
        (directory / "weights.hdf5").write_bytes(open(ELMO_WEIGHT_FILE, "rb").read())
        self.embed(path, embedder=ElmoEmbedder(weight_file=str(directory)), resume=True, batch_size=4, chunk_size=8)
        assert len(read_hdf5(self.TEST_DIR / "out.hdf5")) == 41


class TestBadArguments(EmbedFileTestCase):
    @pytest.mark.parametrize("chunk_size", [0, -5])
    def test_chunk_sizes_that_are_not_positive(self, chunk_size):
        with pytest.raises(ConfigurationError, match=f"chunk_size must be positive .*got {chunk_size}"):
            self.embed(self.write_input(SENTENCES), chunk_size=chunk_size)
        assert os.listdir(self.TEST_DIR) == ["input.txt"]

    def test_the_input_as_output_is_refused_even_with_overwrite(self):
        path = self.write_input(SENTENCES)
        with pytest.raises(ConfigurationError, match="is the input file; writing it would destroy the input"):
            self.embedder.embed_file(path, path, overwrite=True)
        assert open(path, encoding="utf-8").read().splitlines() == SENTENCES

    def test_a_directory_as_output_is_refused_before_any_work(self):
        (self.TEST_DIR / "out.hdf5").mkdir()
        calls = []
        self.embedder.embed_batch_into = lambda batch, writer: calls.append(batch)
        with pytest.raises(ConfigurationError, match="out.hdf5 is a directory"):
            self.embed(self.write_input(SENTENCES))
        assert calls == []

    def test_a_missing_output_directory_is_made(self):
        output = self.TEST_DIR / "new" / "dir" / "out.hdf5"
        self.embedder.embed_file(self.write_input(SENTENCES[:2]), str(output))
        assert set(read_hdf5(output)) == {"0", "1", "sentence_to_index"}

    def test_sentences_must_be_token_lists(self):
        with pytest.raises(TypeError, match=r"lists of strings \(e.g. 'a b'.split\(\)\); got 'a b'"):
            self.embedder.embed_sentence("a b")
        with pytest.raises(TypeError, match="got \\['a', 3\\]"):
            self.embedder.embed_batch([["a", 3]])

    @pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
    def test_a_cuda_device_without_one(self):
        with pytest.raises(ConfigurationError, match="cuda_device 0: this machine has 0 CUDA device.*use -1"):
            ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, cuda_device=0)


class TestDamagedChunks(EmbedFileTestCase):
    @pytest.mark.parametrize("stateful", [False, True])
    def test_a_damaged_finished_chunk_is_embedded_again(self, stateful, caplog):
        path = self.write_input(LINES)
        options = dict(batch_size=4, chunk_size=8)
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5",
                                        embedder=ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful),
                                        **options))
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        interrupt_after(embedder, 7)
        with pytest.raises(KeyboardInterrupt):
            self.embed(path, embedder=embedder, **options)
        partial = self.TEST_DIR / "out.hdf5.partial"
        (partial / "chunk_0000001.hdf5").write_bytes(b"")  # a power loss after the rename
        (partial / ".chunk_0000003.hdf5.abc.tmp").write_bytes(b"half")  # a kill mid-write
        resumed = read_hdf5(self.embed(path, embedder=ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE,
                                                                  stateful=stateful), resume=True, **options))
        assert "chunk_0000001.hdf5 is damaged" in caplog.text
        assert set(resumed) == set(expected)
        for key in expected:
            numpy.testing.assert_array_equal(resumed[key], expected[key])


class TestConcurrentAndKilledRuns(EmbedFileTestCase):
    def test_a_second_writer_is_refused_and_the_first_output_is_intact(self):
        path = self.write_input(SENTENCES)
        output = str(self.TEST_DIR / "out.hdf5")
        with filelock.FileLock(output + ".lock"):  # another process's run holds it
            with pytest.raises(ConfigurationError, match="Another process is writing .*out.hdf5.lock"):
                self.embedder.embed_file(path, output)
        assert not os.path.exists(output + ".partial")
        self.embedder.embed_file(path, output)
        assert not os.path.exists(output + ".lock")

    def run_in_child(self, code: str, **popen) -> subprocess.Popen:
        preamble = (
            "import sys; sys.path.insert(0, %r)\n"
            "from elmo_plugin import ElmoEmbedder\n"
            "embedder = ElmoEmbedder(%r, %r)\n" % (str(REPO_ROOT), ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        )
        return subprocess.Popen([sys.executable, "-c", preamble + code], cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)

    def wait_for(self, condition, child, seconds=120):
        deadline = time.monotonic() + seconds
        while not condition():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def test_two_processes_and_kill_9(self):
        lines = [" ".join(["word"] * (5 + i % 20)) for i in range(3000)]
        path = self.write_input(lines)
        output = str(self.TEST_DIR / "out.hdf5")
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5", chunk_size=100))
        child = self.run_in_child(f"embedder.embed_file({path!r}, {output!r}, chunk_size=100)")
        partial = output + ".partial"
        self.wait_for(lambda: os.path.isdir(partial) and any(n.startswith("chunk_") for n in os.listdir(partial)), child)
        with pytest.raises(ConfigurationError, match="Another process is writing"):
            self.embedder.embed_file(path, output, chunk_size=100, resume=True)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert not os.path.exists(output)
        self.embedder.embed_file(path, output, chunk_size=100, resume=True)
        resumed = read_hdf5(output)
        assert set(resumed) == set(expected)
        for key in expected:
            numpy.testing.assert_array_equal(resumed[key], expected[key])

    @pytest.mark.parametrize("where", ["a chunk", "the merged output"])
    def test_a_full_disk_says_what_happened_and_a_rerun_completes(self, where):
        # A file-size limit stands in for a full disk: writes beyond it fail with EFBIG.
        short = [f"s{i}" for i in range(60)]
        long_lines = [" ".join(["long"] * 400)] * 10
        path = self.write_input(short + long_lines if where == "a chunk" else short)
        output = str(self.TEST_DIR / "out.hdf5")
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5", chunk_size=20))
        chunk_sizes = [os.path.getsize(self.TEST_DIR / "uninterrupted.hdf5")]
        limit = 150_000 if where == "a chunk" else chunk_sizes[0] // 2
        child = self.run_in_child(
            "import resource, signal\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            f"embedder.embed_file({path!r}, {output!r}, chunk_size=20)\n"
        )
        _, errors = child.communicate(timeout=300)
        assert child.returncode != 0
        message = next(line for line in reversed(errors.splitlines()) if line.startswith("OSError"))
        assert "File too large" in message and "--resume" in message, message
        assert ("Cannot write " + output + " (") in message if where == "the merged output" else ".partial/chunk_" in message
        assert not os.path.exists(output)
        for name in os.listdir(output + ".partial"):
            if name.startswith("chunk_"):
                with h5py.File(os.path.join(output + ".partial", name), "r") as handle:
                    assert len(handle) > 0  # every chunk under its name is complete
        self.embedder.embed_file(path, output, chunk_size=20, resume=True)
        resumed = read_hdf5(output)
        for key in expected:
            numpy.testing.assert_array_equal(resumed[key], expected[key])
