"""
How a pre-trained biLM runs: the settings `Elmo`, `elmo_token_embedder` and `ElmoEmbedder` take
from their users and hand to `ElmoBiLm` as one object.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from elmo_plugin.kernels.reduced_precision import FLOAT32, check_precision


@dataclass(frozen=True)
class ElmoSettings:
    """
    # Parameters

    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM's parameters.
    stateful : `bool`, optional (default = `True`)
        `True` (AllenNLP's behaviour): the LSTM state at the end of a batch is carried into
        the next batch, row by row, so a sentence's vectors depend on what came before it.
        `False`: every sentence starts from the biLM's own "between sentences" state (see
        `elmo_plugin.modules.start_state`), so its vectors depend on the sentence alone.
    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"`: the LSTM, highway and projection products in reduced
        precision, for faster inference at a small cost in fidelity (see
        `elmo_plugin.kernels.reduced_precision` and BENCHMARKS.md); not with `requires_grad`.
    vocab_to_cache : `Tuple[str, ...]`, optional (default = `None`)
        Words whose token-layer vectors are computed once, so that `forward` can take word
        ids instead of characters. Index 0 must be padding; ids outside the list fall back to
        the characters.
    """

    requires_grad: bool = False
    stateful: bool = True
    precision: str = FLOAT32
    vocab_to_cache: Optional[Tuple[str, ...]] = None

    def __post_init__(self) -> None:
        check_precision(self.precision, self.requires_grad)
        if self.vocab_to_cache is not None:
            object.__setattr__(self, "vocab_to_cache", tuple(self.vocab_to_cache))
