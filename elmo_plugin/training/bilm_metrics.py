"""
The `elmo_bilm` model's metrics: each direction's perplexity, both together, the share of
`<UNK>` targets and, in evaluation, the perplexity over known words; with their running totals,
which a checkpoint keeps so that `--recover` continues an epoch's figures.
"""
import logging
from typing import Any, Dict, Optional, Tuple

import torch

from elmo_plugin.training.oov_rate import OutOfVocabularyRate
from elmo_plugin.training.token_perplexity import TokenPerplexity, perplexity_of

logger = logging.getLogger(__name__)

# Above this share of <UNK> targets, evaluation warns that the perplexity flatters the model.
OOV_RATE_WARNING = 0.05

DIRECTIONS = ("forward", "backward")


class BiLmMetrics:
    """
    The running metrics of a biLM's two language models. `record` takes a batch's losses per
    direction; `get_metrics` gives AllenNLP's metric dict; `state` and `restore` carry the
    running totals through a checkpoint.
    """

    def __init__(self) -> None:
        self._perplexities = {direction: TokenPerplexity() for direction in DIRECTIONS}
        # Evaluation only (full softmax): the perplexity over targets that are not <UNK>.
        self._in_vocabulary_perplexities = {direction: TokenPerplexity() for direction in DIRECTIONS}
        self._oov_rate = OutOfVocabularyRate()
        self._warned_about_oov_rate = False

    def record(
        self,
        direction: str,
        nll_sum: torch.Tensor,
        count: torch.Tensor,
        known: torch.BoolTensor,
        token_nll: Optional[torch.Tensor] = None,
    ) -> None:
        """
        # Parameters

        direction : `str`
            `"forward"` or `"backward"`.
        nll_sum : `torch.Tensor`
            The batch's negative log-likelihood (natural log) summed over its `count` targets.
        count : `torch.Tensor`
            How many targets the sum covers.
        known : `torch.BoolTensor`
            `(count,)`: which targets are not `<UNK>`.
        token_nll : `torch.Tensor`, optional
            `(count,)`: each target's loss (the full softmax of evaluation), for the
            in-vocabulary perplexity.
        """
        self._perplexities[direction](nll_sum, count)
        if token_nll is not None:
            self._in_vocabulary_perplexities[direction](token_nll[known].sum(), known.sum())
        if direction == "forward":  # both directions predict the same words
            self._oov_rate(int(count - known.sum()), int(count))

    def get_metrics(self, reset: bool = False) -> Dict[str, float]:
        """
        `forward_perplexity`, `backward_perplexity`, `perplexity` (both directions' targets
        together), `oov_rate` (the share of targets that are `<UNK>`: a perplexity on a text
        that the vocabulary mostly misses is low and means little), and in evaluation
        `in_vocabulary_perplexity` (over targets that are not `<UNK>`), with a warning the first
        time the `<UNK>` share passes `OOV_RATE_WARNING`.
        """
        # Read before `get_metric(reset)` empties them.
        together = perplexity_of(*_both_directions(self._perplexities))
        metrics = {
            "forward_perplexity": self._perplexities["forward"].get_metric(reset),
            "backward_perplexity": self._perplexities["backward"].get_metric(reset),
            "perplexity": together,
            "oov_rate": self._oov_rate.get_metric(reset),
        }
        known_nll, known_tokens = _both_directions(self._in_vocabulary_perplexities)
        if known_tokens > 0:
            metrics["in_vocabulary_perplexity"] = perplexity_of(known_nll, known_tokens)
            if metrics["oov_rate"] > OOV_RATE_WARNING and not self._warned_about_oov_rate:
                logger.warning(
                    "%.1f%% of the evaluated targets are <UNK>, which this biLM predicts as one word: "
                    "its perplexity on this text is lower than a full vocabulary's would be. "
                    "Compare in_vocabulary_perplexity, or models with the same vocabulary.",
                    100 * metrics["oov_rate"],
                )
                self._warned_about_oov_rate = True
        if reset:
            for metric in self._in_vocabulary_perplexities.values():
                metric.reset()
        return metrics

    def _metric_objects(self) -> Dict[str, Any]:
        # The names are those of the checkpoints' "metrics": renaming one breaks `--recover`
        # from older checkpoints.
        return {
            **{f"perplexity_{d}": metric for d, metric in self._perplexities.items()},
            **{f"in_vocabulary_{d}": metric for d, metric in self._in_vocabulary_perplexities.items()},
            "oov_rate": self._oov_rate,
        }

    def state(self) -> Dict[str, Dict[str, Any]]:
        """The running totals, by metric, as a checkpoint keeps them."""
        return {name: dict(vars(metric)) for name, metric in self._metric_objects().items()}

    def restore(self, state: Dict[str, Dict[str, Any]]) -> None:
        """Continues from `state()` as a checkpoint saved it."""
        for name, metric in self._metric_objects().items():
            vars(metric).update(state[name])


def _both_directions(perplexities: Dict[str, TokenPerplexity]) -> Tuple[float, int]:
    """Both directions' running totals together: (summed loss, targets)."""
    totals = [perplexities[direction].totals() for direction in DIRECTIONS]
    return sum(total[0] for total in totals), sum(total[1] for total in totals)
