import math

import pytest
import torch

from elmo_plugin.training.bilm_metrics import BiLmMetrics


def record_a_batch(metrics: BiLmMetrics, with_token_losses: bool, scale: float = 1.0) -> None:
    # 4 targets per direction, the last one <UNK>.
    known = torch.tensor([True, True, True, False])
    for direction, token_nll in (("forward", [1.0, 2.0, 3.0, 6.0]), ("backward", [2.0, 2.0, 2.0, 2.0])):
        losses = torch.tensor(token_nll) * scale
        metrics.record(direction, losses.sum(), torch.tensor(4), known, losses if with_token_losses else None)


def test_metrics_weigh_every_target_and_keep_the_known_words_apart():
    metrics = BiLmMetrics()
    record_a_batch(metrics, with_token_losses=True)
    values = metrics.get_metrics()
    assert values["forward_perplexity"] == pytest.approx(math.exp(12.0 / 4))
    assert values["backward_perplexity"] == pytest.approx(math.exp(8.0 / 4))
    assert values["perplexity"] == pytest.approx(math.exp(20.0 / 8))
    assert values["oov_rate"] == pytest.approx(1 / 4)  # counted once, not per direction
    assert values["in_vocabulary_perplexity"] == pytest.approx(math.exp((6.0 + 6.0) / 6))
    # Training (the sampled softmax) has no per-target losses: no in-vocabulary figure.
    training = BiLmMetrics()
    record_a_batch(training, with_token_losses=False)
    assert "in_vocabulary_perplexity" not in training.get_metrics()


def test_a_checkpoints_totals_continue_where_they_stopped():
    metrics = BiLmMetrics()
    record_a_batch(metrics, with_token_losses=True)
    state = metrics.state()
    # Checkpoints of earlier runs hold these names; `--recover` reads them.
    assert set(state) == {
        "perplexity_forward",
        "perplexity_backward",
        "in_vocabulary_forward",
        "in_vocabulary_backward",
        "oov_rate",
    }
    resumed = BiLmMetrics()
    resumed.restore(state)
    # A different batch: the figures after it depend on what came before.
    record_a_batch(metrics, with_token_losses=True, scale=0.5)
    record_a_batch(resumed, with_token_losses=True, scale=0.5)
    values = metrics.get_metrics(reset=True)
    assert values["forward_perplexity"] == pytest.approx(math.exp(18.0 / 8))
    assert resumed.get_metrics(reset=True) == values
    assert math.isnan(resumed.get_metrics()["perplexity"])  # reset: no targets yet
