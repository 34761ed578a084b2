"""Perplexity weighted by token over all batches, not an average of batch averages."""
import math

import torch

from elmo_plugin.training.token_perplexity import TokenPerplexity, perplexity_of


def test_perplexity_counts_every_token_once_across_batches():
    metric = TokenPerplexity()
    metric(torch.tensor(10.0), torch.tensor(5))  # 5 tokens, mean 2
    metric(torch.tensor(4.0), torch.tensor(1))  # 1 token, mean 4
    assert metric.totals() == (14.0, 6)
    assert math.isclose(metric.get_metric(), math.exp(14.0 / 6))
    assert not math.isclose(metric.get_metric(), math.exp((2.0 + 4.0) / 2))  # mean of means


def test_reset_starts_over():
    metric = TokenPerplexity()
    metric(torch.tensor(3.0), torch.tensor(3))
    assert math.isclose(metric.get_metric(reset=True), math.e)
    assert metric.totals() == (0.0, 0)
    assert math.isnan(metric.get_metric())


def test_no_tokens_and_overflow():
    assert math.isnan(perplexity_of(5.0, 0))
    assert perplexity_of(701.0, 1) == float("inf")
    assert math.isclose(perplexity_of(699.0, 1), math.exp(699.0))
