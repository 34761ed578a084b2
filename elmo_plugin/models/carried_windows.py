"""
The LSTM state that packed windows carry from one batch to the next (truncated backpropagation
through time, as bilm-tf trains) in the `elmo_bilm` model: one state per mode (the training and
the validation data are different streams), each batch's metadata checked against it, and what
a checkpoint saves of it for an exact `allennlp train --recover`.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.modules.start_state import LstmState

_MODE_NAMES = ((True, "training"), (False, "validation"))


class CarriedWindowState:
    """Per mode (training or not), the final LSTM state of the last batch and that batch's step."""

    def __init__(self) -> None:
        self._carried: Dict[bool, Optional[Tuple[LstmState, int]]] = {True: None, False: None}

    def start(
        self,
        metadata: List[Dict[str, int]],
        training: bool,
        zero_state: Callable[[int], LstmState],
        reference: torch.Tensor,
    ) -> LstmState:
        """
        The state a batch of packed windows starts from: the mode's carried state where the
        batch is the next step of the same streams, `zero_state(batch_size)` at the start of a
        pass. A `ConfigurationError` for windows out of stream order or a batch size that
        changed, naming the data loader's settings that cause them.

        # Parameters

        metadata : `List[Dict[str, int]]`
            Each row's `stream` and `step` (`elmo_bilm_corpus`).
        training : `bool`
            The mode whose state to continue.
        zero_state : `Callable[[int], LstmState]`
            `batch_size ->` an all-zero state.
        reference : `torch.Tensor`
            The carried state is moved to its device and dtype.
        """
        streams = [row["stream"] for row in metadata]
        steps = {row["step"] for row in metadata}
        if streams != list(range(len(metadata))) or len(steps) != 1:
            raise ConfigurationError(
                "elmo_bilm: packed windows arrived out of stream order (streams "
                f"{streams[:8]}..., steps {sorted(steps)[:4]}). Set the data loader's "
                "batch_size to the reader's num_streams, shuffle to false and num_workers to 0."
            )
        step = steps.pop()
        carried = self._carried[training]
        batch_size = len(metadata)
        if step == 0 or carried is None or carried[1] != step - 1:
            # The start of a pass over the data (or of a different stream): no history.
            return zero_state(batch_size)
        state = (carried[0][0].to(reference), carried[0][1].to(reference))
        if state[0].size(1) != batch_size:
            raise ConfigurationError(
                f"elmo_bilm: a batch of {batch_size} windows follows one of "
                f"{state[0].size(1)}; the data loader's batch_size must equal num_streams."
            )
        return state

    def keep(self, training: bool, final_state: LstmState, metadata: List[Dict[str, int]]) -> None:
        """The batch's final state, for the mode's next batch (no gradient flows back into it)."""
        self._carried[training] = ((final_state[0].detach(), final_state[1].detach()), metadata[0]["step"])

    def recovery_state(self) -> Dict[str, Any]:
        """Both modes' carried states and steps, as a checkpoint holds them."""
        return {name: self._saved_form(self._carried[mode]) for mode, name in _MODE_NAMES}

    @staticmethod
    def _saved_form(carried: Optional[Tuple[LstmState, int]]) -> Optional[Tuple[torch.Tensor, torch.Tensor, int]]:
        """`(state, memory, step)`, or `None` where nothing is carried."""
        if carried is None:
            return None
        (state, memory), step = carried
        return state, memory, step

    def restore(self, state: Dict[str, Any]) -> None:
        """Continues from `recovery_state()` as a checkpoint saved it."""
        for mode, name in _MODE_NAMES:
            carried = state[name]
            self._carried[mode] = None if carried is None else ((carried[0], carried[1]), carried[2])
