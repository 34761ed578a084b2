"""
Token-budget batches and sentences longer than the budget: read in segments, the same vectors
as reading them whole, in every output format and both state modes; memory bounded by the
budget (BENCHMARKS.md measures it).
"""
from types import SimpleNamespace

import numpy
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
from elmo_plugin.inference import elmo_embedder
from elmo_plugin.inference.embed_file import _batches
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, read_hdf5
from tests.inference.test_embed_file import EmbedFileTestCase, interrupt_after

# Lines of 1 to 60 tokens, and two far longer than a budget of 16 positions.
LINES = [" ".join(f"w{(i * 3 + j) % 29}" for j in range(1 + (i * 7) % 60)) for i in range(30)]
LINES[4] = " ".join(f"long{j % 13}" for j in range(230))
LINES[17] = " ".join(f"x{j % 5}" for j in range(75))
SMALL_BUDGET = 16


def embedder(stateful=False, max_tokens_per_batch=elmo_embedder.DEFAULT_MAX_TOKENS_PER_BATCH):
    return ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=stateful,
                        max_tokens_per_batch=max_tokens_per_batch)


@pytest.mark.parametrize("stateful", [False, True])
def test_embed_batch_reads_long_sentences_in_segments_with_the_same_result(stateful):
    batches = [[line.split() for line in LINES[:10]], [line.split() for line in LINES[10:]], [[], ["a"]]]
    whole, segmented = embedder(stateful), embedder(stateful, SMALL_BUDGET)
    for batch in batches:
        for expected, actual in zip(whole.embed_batch(batch), segmented.embed_batch(batch)):
            assert actual.shape == expected.shape
            numpy.testing.assert_allclose(actual, expected, atol=2e-6, rtol=0)
    if stateful:  # the state carried into the next batch too
        for expected, actual in zip(whole.batch_start_state.get(), segmented.batch_start_state.get()):
            assert (actual - expected).abs().max() < 2e-6


class TestTheFileEngine(EmbedFileTestCase):
    @pytest.mark.parametrize("output_format", ["all", "top", "average"])
    @pytest.mark.parametrize("stateful", [False, True])
    def test_long_lines_stream_into_the_output(self, output_format, stateful):
        path = self.write_input(LINES)
        options = dict(output_format=output_format, batch_size=4, chunk_size=8)
        expected = read_hdf5(self.embed(path, "whole.hdf5", embedder=embedder(stateful), **options))
        actual = read_hdf5(self.embed(path, "segments.hdf5", embedder=embedder(stateful, SMALL_BUDGET), **options))
        assert set(actual) == set(expected)
        for key in expected:
            if key == "sentence_to_index":
                assert actual[key] == expected[key]
            else:
                numpy.testing.assert_allclose(actual[key], expected[key], atol=2e-6, rtol=0, err_msg=key)

    def test_a_resumed_run_keeps_its_budget(self):
        path = self.write_input(LINES)
        output = str(self.TEST_DIR / "out.hdf5")
        interrupted = embedder(max_tokens_per_batch=64)
        interrupt_after(interrupted, 1)
        with pytest.raises(KeyboardInterrupt):
            interrupted.embed_file(path, output, chunk_size=8)
        with pytest.raises(ConfigurationError, match="different max_tokens_per_batch"):
            embedder(max_tokens_per_batch=128).embed_file(path, output, chunk_size=8, resume=True)


def test_token_budget_batches():
    lengths = [3, 50, 1, 200, 7, 7, 30, 0, 12]
    batches = list(_batches(lengths, batch_size=100, stateful=False, max_tokens=64))
    assert sorted(p for batch in batches for p in batch) == list(range(len(lengths)))
    for batch in batches:
        padded = len(batch) * (max(lengths[p] for p in batch) + 2)
        assert padded <= 64 or len(batch) == 1  # a line beyond the budget is a batch of its own
    assert [3] in batches and [1] in batches
    # The sentence cap still holds, and stateful batches are consecutive lines as in 0.9.
    assert max(len(b) for b in _batches([1] * 50, batch_size=8, stateful=False, max_tokens=10_000)) == 8
    assert list(_batches(lengths, 4, True, 64)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    # Without a sentence cap (--batch-size not given), the budget alone: 300 one-token lines fill one.
    assert [len(b) for b in _batches([1] * 400, batch_size=None, stateful=False, max_tokens=900)] == [300, 100]


def test_the_python_api_says_when_a_sentences_vectors_cannot_fit(monkeypatch):
    monkeypatch.setattr(elmo_embedder.psutil, "virtual_memory", lambda: SimpleNamespace(available=10_000))
    with pytest.raises(MemoryError, match="sentence of 230 tokens has .* GiB of vectors .* embed it into a file"):
        embedder(max_tokens_per_batch=SMALL_BUDGET).embed_sentence(LINES[4].split())


def test_a_budget_too_small_for_one_token_is_refused():
    with pytest.raises(ConfigurationError, match="max_tokens_per_batch must be at least 3"):
        embedder(max_tokens_per_batch=2)


def record_token_positions(embedder_, monkeypatch):
    """Records rows x positions of every character-id tensor the biLM reads."""
    encoder = embedder_.elmo_bilm.token_embedder
    read_sizes = []
    forward = encoder.forward

    def recording(ids, *args, **kwargs):
        read_sizes.append(ids.shape[0] * ids.shape[1])
        return forward(ids, *args, **kwargs)

    monkeypatch.setattr(encoder, "forward", recording)
    return read_sizes


@pytest.mark.parametrize("stateful", [False, True])
def test_the_budget_binds_whatever_the_batch_holds(stateful, monkeypatch):
    # 200 short sentences and long ones in one batch: read in groups within the budget.
    batch = [line.split() for line in LINES] + [["a", "b"]] * 200
    budget = 64
    bounded = embedder(stateful, budget)
    read_sizes = record_token_positions(bounded, monkeypatch)
    actual = bounded.embed_batch(batch)
    assert read_sizes and max(read_sizes) <= budget
    for expected, vectors in zip(embedder(stateful).embed_batch(batch), actual):
        numpy.testing.assert_allclose(vectors, expected, atol=2e-6, rtol=0)


class TestTheBudgetInTheFileEngine(EmbedFileTestCase):
    def test_a_given_batch_size_does_not_lift_the_budget(self):
        # Stateful batches of 50 consecutive lines, one of them far longer than the rest.
        lines = ["one two three"] * 60 + [" ".join(["long"] * 300)] + ["four five"] * 39
        path = self.write_input(lines)
        expected = read_hdf5(self.embed(path, "unbounded.hdf5", embedder=embedder(True), batch_size=50))
        bounded = embedder(True, max_tokens_per_batch=100)
        with pytest.MonkeyPatch.context() as patch:
            read_sizes = record_token_positions(bounded, patch)
            actual = read_hdf5(self.embed(path, "bounded.hdf5", embedder=bounded, batch_size=50))
        assert max(read_sizes) <= 100
        for key in expected:
            if key != "sentence_to_index":
                numpy.testing.assert_allclose(actual[key], expected[key], atol=2e-6, rtol=0, err_msg=key)


def test_embed_sentences_refuses_a_batch_size_below_one():
    with pytest.raises(ConfigurationError, match="batch_size must be at least 1, got 0"):
        list(embedder().embed_sentences([["a"]], batch_size=0))
