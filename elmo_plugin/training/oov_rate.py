"""The share of predicted tokens that are unknown words, over all batches (and workers)."""
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.metrics.metric import Metric
from overrides import overrides


class OutOfVocabularyRate(Metric):
    """
    `unknown targets / all targets`, counted over every batch since the last reset (and summed
    across workers in distributed training). A perplexity means little without it: a model
    that predicts `<UNK>` for most of a text scores a low perplexity on it.
    """

    def __init__(self) -> None:
        self._unknown = 0
        self._total = 0

    @overrides
    def __call__(self, unknown: int, total: int) -> None:  # type: ignore
        """
        # Parameters

        unknown : `int`
            Targets of a batch that are the vocabulary's unknown word.
        total : `int`
            All targets of the batch.
        """
        self._unknown += dist_reduce_sum(int(unknown))
        self._total += dist_reduce_sum(int(total))

    @overrides
    def get_metric(self, reset: bool = False) -> float:
        rate = self._unknown / self._total if self._total else float("nan")
        if reset:
            self.reset()
        return rate

    @overrides
    def reset(self) -> None:
        self._unknown = 0
        self._total = 0
