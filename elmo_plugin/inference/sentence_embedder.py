"""
What the file engine (`embed_file`) needs of an embedder: `ElmoEmbedder` is one; another
model that writes per-token vectors can be one too.
"""
from typing import Dict, List, Protocol

import torch

from elmo_plugin.modules.start_state import BatchStartState


class SentenceEmbedder(Protocol):
    """What the engine needs of an embedder (`ElmoEmbedder` is one). To run in several
    processes it must also pickle (each worker gets its own copy)."""

    @property
    def stateful(self) -> bool:
        """Whether the LSTM state is carried from batch to batch (0.9's file-order batches)."""
        ...

    @property
    def batch_start_state(self) -> BatchStartState:
        """The carried state, saved with every chunk and restored on resume."""
        ...

    @property
    def max_tokens_per_batch(self) -> int:
        """Token positions per batch, and per segment of a longer sentence."""
        ...

    @property
    def num_layers(self) -> int:
        ...

    @property
    def output_dim(self) -> int:
        ...

    def embed_batch_into(self, batch: List[List[str]], writer) -> None:
        """Each sentence's vectors to `writer`, whole or in segments (`ElmoEmbedder`)."""
        ...

    def identity(self) -> Dict[str, str]:
        """What a resumed run must share besides its settings: the model, how it computes."""
        ...

    @property
    def device(self) -> torch.device:
        """Where it computes."""
        ...

    def move_to(self, device: torch.device) -> None:
        """Computes on `device` from now on (a worker process's own GPU)."""
        ...
