import json
import os
import subprocess
import sys

import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.testing import AllenNlpTestCase
from allennlp.modules.elmo import _ElmoBiLm as AllenNlpElmoBiLm
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin import ElmoEmbedder, batch_to_ids
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT, read_hdf5

SENTENCES = [
    "The bats hang upside down .",
    "Bats are made of wood",
    "A much longer sentence about baseball bats and the players who swing them hard",
    "Short one",
    "Another sentence with several more tokens in it",
    "x",
    "The bats hang upside down .",
]


def interrupt_after(embedder, batches):
    """Makes `embedder` raise KeyboardInterrupt (as Ctrl-C would) after `batches` batches."""
    calls = {"n": 0}
    original = embedder.embed_batch_into

    def flaky(batch, writer):
        calls["n"] += 1
        if calls["n"] > batches:
            raise KeyboardInterrupt
        return original(batch, writer)

    embedder.embed_batch_into = flaky


class EmbedFileTestCase(AllenNlpTestCase):
    def setup_method(self):
        super().setup_method()
        self.embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)

    def write_input(self, lines, name="input.txt", ending="\n", final_newline=True) -> str:
        path = self.TEST_DIR / name
        text = ending.join(lines) + (ending if final_newline else "")
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        return str(path)

    def embed(self, input_path, name="out.hdf5", embedder=None, **options) -> str:
        output = str(self.TEST_DIR / name)
        (embedder or self.embedder).embed_file(input_path, output, **options)
        return output


class TestEmbedFile(EmbedFileTestCase):
    def test_seed_notebook_case(self):
        lines = ["I ate a carrot for breakfast", "I ate an apple", "The weather is nice today ."]
        content = read_hdf5(self.embed(self.write_input(lines)))
        assert set(content) == {"0", "1", "2", "sentence_to_index"}
        assert [content[k].shape for k in "012"] == [(3, 6, 32), (3, 4, 32), (3, 6, 32)]
        mapping = json.loads(content["sentence_to_index"][0])
        assert mapping == {line: str(i) for i, line in enumerate(lines)}

    def test_top_and_average_are_reductions_of_all(self):
        path = self.write_input(SENTENCES)
        everything = read_hdf5(self.embed(path, "all.hdf5"))
        top = read_hdf5(self.embed(path, "top.hdf5", output_format="top"))
        average = read_hdf5(self.embed(path, "average.hdf5", output_format="average"))
        for key in map(str, range(len(SENTENCES))):
            numpy.testing.assert_array_equal(top[key], everything[key][-1])
            numpy.testing.assert_allclose(average[key], everything[key].mean(axis=0), rtol=0, atol=1e-6)

    def test_file_equals_embed_sentence_in_deterministic_mode(self):
        content = read_hdf5(self.embed(self.write_input(SENTENCES), batch_size=3))
        for index, sentence in enumerate(SENTENCES):
            alone = self.embedder.embed_sentence(sentence.split())
            numpy.testing.assert_allclose(content[str(index)], alone, rtol=0, atol=1e-6)

    def test_stateful_reproduces_allennlp_carried_state(self):
        batch_size = 3
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True)
        content = read_hdf5(self.embed(self.write_input(SENTENCES), embedder=embedder,
                                       batch_size=batch_size, chunk_size=4))
        oracle = AllenNlpElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        for start in range(0, len(SENTENCES), batch_size):
            batch = [s.split() for s in SENTENCES[start : start + batch_size]]
            with torch.no_grad():
                output = oracle(batch_to_ids(batch))
            layers = [remove_sentence_boundaries(a, output["mask"])[0] for a in output["activations"]]
            for row, tokens in enumerate(batch):
                expected = torch.stack([layer[row, : len(tokens)] for layer in layers]).numpy()
                numpy.testing.assert_allclose(content[str(start + row)], expected, rtol=0, atol=1e-6)

    def test_blank_lines_are_refused_with_their_line_numbers(self):
        path = self.write_input(["one", "", "two", "   ", "three"])
        with pytest.raises(ConfigurationError, match=r"blank lines \(line 2, 4\).*--allow-empty-lines"):
            self.embed(path)
        assert not os.path.exists(self.TEST_DIR / "out.hdf5")

    def test_blank_lines_kept_as_empty_entries_without_shifting_keys(self):
        lines = ["one two", "", "three"]
        content = read_hdf5(self.embed(self.write_input(lines), allow_empty_lines=True))
        assert content["1"].shape == (3, 0, 32)
        numpy.testing.assert_allclose(content["2"], self.embedder.embed_sentence(["three"]), atol=1e-6)

    def test_sentence_keys_with_duplicates(self):
        # As 0.9: the keys are the sentences, no `sentence_to_index` beside them.
        lines = SENTENCES + ["sentence_to_index"]
        content = read_hdf5(self.embed(self.write_input(lines), use_sentence_keys=True))
        assert set(content) == set(lines)
        numpy.testing.assert_allclose(
            content["x"], self.embedder.embed_sentence(["x"]), rtol=0, atol=1e-6
        )
        assert content["sentence_to_index"].shape == (3, 1, 32)  # a sentence like any other

    def test_sentence_keys_in_stateful_mode_keep_the_first_of_repeated_sentences(self):
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True)
        content = read_hdf5(self.embed(self.write_input(SENTENCES), embedder=embedder,
                                       batch_size=3, use_sentence_keys=True, forget_sentences=True))
        by_index = read_hdf5(self.embed(self.write_input(SENTENCES), "indices.hdf5",
                                        embedder=ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True),
                                        batch_size=3))
        assert set(content) == set(SENTENCES)
        numpy.testing.assert_array_equal(content["The bats hang upside down ."], by_index["0"])
        assert not numpy.array_equal(by_index["0"], by_index["6"])  # carried state differs

    def test_sentence_keys_refuse_slashes(self):
        path = self.write_input(["fine", "and/or not", "also fine", "."])
        with pytest.raises(ConfigurationError, match=r"line 2, 4 cannot be an HDF5 dataset name"):
            self.embed(path, use_sentence_keys=True)

    def test_forget_sentences(self):
        content = read_hdf5(self.embed(self.write_input(SENTENCES[:2]), forget_sentences=True))
        assert set(content) == {"0", "1"}

    def test_refuses_to_overwrite(self):
        path = self.write_input(SENTENCES[:2])
        output = self.embed(path)
        before = read_hdf5(output)
        with pytest.raises(ConfigurationError, match="already exists; pass --overwrite"):
            self.embed(path)
        self.embed(self.write_input(SENTENCES[2:4], "other.txt"), overwrite=True)
        assert read_hdf5(output)["0"].shape != before["0"].shape

    def test_hostile_inputs(self):
        lines = ["crlf line ending", "x " * 5000, "tok" * 100 + " short", "ünïcödé 東京", "no final newline"]
        path = self.TEST_DIR / "hostile.txt"
        path.write_bytes("\r\n".join(lines).encode("utf-8"))
        content = read_hdf5(self.embed(str(path)))
        assert [content[str(i)].shape[1] for i in range(5)] == [3, 5000, 2, 2, 3]
        mapping = json.loads(content["sentence_to_index"][0])
        assert "crlf line ending" in mapping  # no "\r" in keys
        # A 300-byte token is cut to 48 bytes, like every token.
        numpy.testing.assert_allclose(
            content["2"], self.embedder.embed_sentence(["tok" * 16, "short"]), rtol=0, atol=1e-6
        )

    def test_invalid_utf8_names_the_line(self):
        path = self.TEST_DIR / "latin1.txt"
        path.write_bytes("fine\n".encode() + "caf\xe9 au lait\n".encode("latin-1"))
        with pytest.raises(ConfigurationError, match=r"latin1.txt, line 2: not valid UTF-8"):
            self.embed(str(path))

    def test_empty_file(self):
        with pytest.raises(ConfigurationError, match="is empty"):
            self.embed(self.write_input([], final_newline=False))


class TestResume(EmbedFileTestCase):
    @pytest.mark.parametrize("stateful", [False, True])
    def test_resume_equals_uninterrupted_run(self, stateful):
        lines = [" ".join(["w%d" % j for j in range(1 + (i * 7) % 11)]) for i in range(40)]
        path = self.write_input(lines)
        options = dict(batch_size=4, chunk_size=8)
        fresh = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5", embedder=fresh, **options))

        interrupted = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        interrupt_after(interrupted, 5)
        output = str(self.TEST_DIR / "resumed.hdf5")
        with pytest.raises(KeyboardInterrupt):
            interrupted.embed_file(path, output, **options)
        assert not os.path.exists(output)
        chunks = [n for n in os.listdir(output + ".partial") if n.startswith("chunk_")]
        assert chunks and not any(n.endswith(".tmp") for n in chunks)
        with pytest.raises(ConfigurationError, match="--resume"):
            self.embed(path, "resumed.hdf5", **options)

        resumer = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful)
        self.embed(path, "resumed.hdf5", embedder=resumer, resume=True, **options)
        assert not os.path.exists(output + ".partial")
        resumed = read_hdf5(output)
        assert set(resumed) == set(expected)
        for key in expected:
            numpy.testing.assert_array_equal(resumed[key], expected[key])

    def test_disk_full_leaves_no_partial_chunk_and_resumes(self):
        path = self.write_input(SENTENCES * 3)
        expected = read_hdf5(self.embed(path, "uninterrupted.hdf5", batch_size=2, chunk_size=4))
        original = h5py.h5d.create  # how the chunk writer makes each line's dataset
        calls = {"n": 0}

        def failing_create(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 10:
                raise OSError(28, "No space left on device")
            return original(*args, **kwargs)

        h5py.h5d.create = failing_create
        try:
            with pytest.raises(OSError, match="No space left"):
                self.embed(path, batch_size=2, chunk_size=4)
        finally:
            h5py.h5d.create = original
        partial = self.TEST_DIR / "out.hdf5.partial"
        assert sorted(n for n in os.listdir(partial) if n.startswith("chunk_")) == [
            "chunk_0000000.hdf5", "chunk_0000001.hdf5"
        ]
        resumed = read_hdf5(self.embed(path, resume=True, batch_size=2, chunk_size=4))
        for key in expected:
            numpy.testing.assert_array_equal(resumed[key], expected[key])

    def test_resume_refuses_other_settings(self):
        path = self.write_input(SENTENCES)
        interrupt_after(self.embedder, 1)
        with pytest.raises(KeyboardInterrupt):
            self.embed(path, batch_size=1, chunk_size=2)
        with pytest.raises(ConfigurationError, match="different batch_size"):
            self.embed(path, embedder=ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE),
                       resume=True, batch_size=2, chunk_size=2)


class TestElmoCommandLine(EmbedFileTestCase):
    def test_allennlp_elmo_runs_for_real(self):
        path = self.write_input(SENTENCES[:3])
        output = str(self.TEST_DIR / "cli.hdf5")
        completed = subprocess.run(
            [sys.executable, "-m", "allennlp", "elmo", path, output, "--top",
             "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE,
             "--batch-size", "2", "--file-friendly-logging"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        )
        assert completed.returncode == 0, completed.stderr[-5000:]
        content = read_hdf5(output)
        assert content["0"].shape == (6, 32)
        # By default 0.9's results: batches of consecutive lines with carried state.
        stateful = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True)
        first_batch = stateful.embed_batch([s.split() for s in SENTENCES[:2]])
        third = stateful.embed_batch([SENTENCES[2].split()])[0]
        numpy.testing.assert_allclose(content["1"], first_batch[1][-1], rtol=0, atol=1e-6)
        numpy.testing.assert_allclose(content["2"], third[-1], rtol=0, atol=1e-6)

    def test_python_m_elmo_plugin_finds_the_command_anywhere(self):
        # allennlp itself only sees plugin subcommands through a .allennlp_plugins file.
        completed = subprocess.run(
            [sys.executable, "-m", "elmo_plugin", "elmo", "--help"],
            cwd=self.TEST_DIR, capture_output=True, text=True, timeout=600,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert "--use-sentence-keys" in completed.stdout and "--resume" in completed.stdout


class TestEmbedFileOptions(EmbedFileTestCase):
    def test_one_frozen_object_validated_when_built(self):
        import dataclasses

        from elmo_plugin.inference.embed_file_options import EmbedFileOptions

        options = EmbedFileOptions(chunk_size=2, output_format="top")
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.chunk_size = 3
        for bad, message in [({"chunk_size": 0}, "chunk_size must be positive"),
                             ({"output_format": "mean"}, "output_format must be one of"),
                             ({"num_workers": 0}, "num_workers must be positive")]:
            with pytest.raises(ConfigurationError, match=message):
                EmbedFileOptions(**bad)
        # The object and the same fields by keyword give the same file.
        path = self.write_input(["The cat sat .", "A dog"])
        by_object = read_hdf5(self.embed(path, "object.hdf5", options=options))
        by_keyword = read_hdf5(self.embed(path, "keyword.hdf5", chunk_size=2, output_format="top"))
        assert set(by_object) == set(by_keyword)
        for key in by_object:
            numpy.testing.assert_array_equal(by_object[key], by_keyword[key])

    def test_options_by_object_and_by_keyword_at_once_are_refused(self):
        from elmo_plugin.inference.embed_file_options import EmbedFileOptions

        path = self.write_input(["a b"])
        with pytest.raises(ConfigurationError, match="as an EmbedFileOptions or by keyword, not both"):
            self.embed(path, options=EmbedFileOptions(), chunk_size=2)
        assert not (self.TEST_DIR / "out.hdf5").exists()
