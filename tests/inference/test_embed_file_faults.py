"""
The file engine under bad input and faults: a resumed run that would mix models, bad chunk
sizes, damaged chunks, paths that would destroy data, a second writer, kill -9, a full disk.
"""
import json
import os
import re
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
from tests.random_weights import write_random_elmo
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT, fixture_options, read_hdf5
from tests.inference.test_embed_file import SENTENCES, EmbedFileTestCase, interrupt_after

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

    @pytest.mark.parametrize("text", ['{"chunk_size": 8', "[8]", "\udcff"])
    def test_a_damaged_settings_file_is_named(self, text):
        path = self.interrupted_run()
        manifest = self.TEST_DIR / "out.hdf5.partial" / "settings.json"
        manifest.write_bytes(text.encode("utf-8", "surrogateescape"))
        with pytest.raises(ConfigurationError, match=f"{manifest} is not the settings an interrupted run writes"):
            self.embed(path, resume=True, batch_size=4, chunk_size=8)

    def test_a_setting_the_earlier_run_did_not_record_is_named(self):
        # As from another version of this package, which recorded fewer settings.
        path = self.interrupted_run()
        manifest = self.TEST_DIR / "out.hdf5.partial" / "settings.json"
        settings = json.loads(manifest.read_text())
        del settings["precision"]
        manifest.write_text(json.dumps(settings))
        with pytest.raises(ConfigurationError, match="started with different precision .*--overwrite"):
            self.embed(path, resume=True, batch_size=4, chunk_size=8)

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


def edit_during_run(embedder, after_batches, edit):
    """Calls `edit()` once, after `embedder` has embedded `after_batches` batches."""
    calls = {"n": 0}
    original = embedder.embed_batch_into

    def editing(batch, writer):
        original(batch, writer)
        calls["n"] += 1
        if calls["n"] == after_batches:
            edit()

    embedder.embed_batch_into = editing


class TestAnInputChangedDuringTheRun(EmbedFileTestCase):
    # Long enough lines that the run reads the file in several buffers (an edit after the first
    # batch reaches what the run reads later).
    LINES = [f"sentence {i:03d} " + " ".join(["words"] * 150) for i in range(40)]

    def replace_line(self, path, index, text):
        lines = open(path, encoding="utf-8").read().splitlines()
        lines[index] = text[: len(lines[index])].ljust(len(lines[index]))  # the same size: only a digest sees it
        with open(path, "w", encoding="utf-8") as handle:  # in place, as an editor would
            handle.write("\n".join(lines) + "\n")

    @pytest.mark.parametrize("stateful", [False, True])
    @pytest.mark.parametrize("edited_line, after_batches, where", [
        (35, 1, "lines 31-40"),  # a chunk not yet read: found when it is read
        (2, 4, "lines 1-10"),  # a chunk already embedded: found when the merge reads it again
    ])
    def test_it_is_refused_and_the_finished_chunks_are_kept(self, stateful, edited_line, after_batches, where):
        path = self.write_input(self.LINES)
        output = str(self.TEST_DIR / "out.hdf5")
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        edit_during_run(embedder, after_batches, lambda: self.replace_line(path, edited_line, "other words here " * 100))
        with pytest.raises(ConfigurationError, match=rf"input.txt changed during the run \({where} differ"):
            embedder.embed_file(path, output, chunk_size=10, batch_size=10)
        assert not os.path.exists(output)
        assert any(name.startswith("chunk_") for name in os.listdir(output + ".partial"))
        # Resuming with the changed text is refused too; restoring it finishes the run.
        with pytest.raises(ConfigurationError, match="input.txt has changed since the interrupted run"):
            ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful).embed_file(
                path, output, chunk_size=10, batch_size=10, resume=True)
        self.replace_line(path, edited_line, self.LINES[edited_line])
        fresh = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        fresh.embed_file(path, output, chunk_size=10, batch_size=10, resume=True)
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5", chunk_size=10, batch_size=10,
                                        embedder=ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)))
        actual = read_hdf5(output)
        assert set(actual) == set(expected)
        for key in expected:
            numpy.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


class TestLeftoversAndInputsThatAreNotFiles(EmbedFileTestCase):
    def test_a_merge_killed_midway_leaves_nothing_after_the_next_run(self):
        path = self.write_input(SENTENCES)
        output = self.TEST_DIR / "out.hdf5"
        # What a run killed while merging (into OUTPUT, and into a shard) leaves beside OUTPUT.
        leftovers = [self.TEST_DIR / ".out.hdf5.k2j4x9aa.hdf5.merging", self.TEST_DIR / ".out-00001.hdf5.q8w1z0bb.hdf5.merging"]
        unrelated = self.TEST_DIR / ".other.hdf5.k2j4x9aa.hdf5.merging"
        for leftover in leftovers + [unrelated]:
            leftover.write_bytes(b"half a merge")
        self.embedder.embed_file(path, str(output), resume=True)
        assert not any(leftover.exists() for leftover in leftovers)
        assert unrelated.exists()  # another output's: not ours to remove
        assert read_hdf5(output)["0"].shape[1] == len(SENTENCES[0].split())

    @pytest.mark.parametrize("kind, message", [
        ("fifo", "is a pipe or a device, not a regular file: allennlp elmo reads its input several times"),
        ("dash", "- is standard input: allennlp elmo reads its input several times"),
        ("directory", "is a directory; give a text file with one sentence per line"),
        ("missing", "does not exist"),
    ])
    def test_an_input_that_is_not_a_file_says_what_it_is(self, kind, message):
        if kind == "fifo":
            path = str(self.TEST_DIR / "fifo")
            os.mkfifo(path)
        elif kind == "dash":
            path = "-"
        elif kind == "directory":
            path = str(self.TEST_DIR)
        else:
            path = str(self.TEST_DIR / "missing.txt")
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            self.embedder.embed_file(path, str(self.TEST_DIR / "out.hdf5"))
        assert not os.path.exists(self.TEST_DIR / "out.hdf5.partial")
