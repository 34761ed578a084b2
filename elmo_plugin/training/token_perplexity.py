"""Perplexity over all tokens seen, weighted by token (not an average of batch averages)."""
import math
from typing import Tuple

import torch
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.metrics.metric import Metric
from overrides import overrides

# math.exp overflows beyond this; an untrained model's perplexity can get there.
_LARGEST_EXPONENT = 700.0


class TokenPerplexity(Metric):
    """
    `exp(total negative log-likelihood / total predicted tokens)`, summed across batches (and
    across workers in distributed training). AllenNLP's `Perplexity` exponentiates the mean of
    per-batch mean losses, which weights a short batch like a long one.
    """

    def __init__(self) -> None:
        self._total_nll = 0.0
        self._total_tokens = 0

    @overrides
    def __call__(self, nll_sum: torch.Tensor, num_tokens: torch.Tensor) -> None:  # type: ignore
        """
        # Parameters

        nll_sum : `torch.Tensor`
            Summed negative log-likelihood (natural log) of a batch's predictions.
        num_tokens : `torch.Tensor`
            How many predictions that sum covers.
        """
        self._total_nll += dist_reduce_sum(float(nll_sum.detach()))
        self._total_tokens += dist_reduce_sum(int(num_tokens))

    @overrides
    def get_metric(self, reset: bool = False) -> float:
        perplexity = perplexity_of(self._total_nll, self._total_tokens)
        if reset:
            self.reset()
        return perplexity

    @overrides
    def reset(self) -> None:
        self._total_nll = 0.0
        self._total_tokens = 0

    def totals(self) -> Tuple[float, int]:
        """The running negative log-likelihood and token count (to combine several)."""
        return self._total_nll, self._total_tokens


def perplexity_of(total_nll: float, total_tokens: int) -> float:
    """`exp(total_nll / total_tokens)`; NaN without tokens, inf where exp overflows."""
    if not total_tokens:
        return float("nan")
    mean_nll = total_nll / total_tokens
    return math.exp(mean_nll) if mean_nll < _LARGEST_EXPONENT else float("inf")
