"""
What state the biLM's LSTM stack starts a batch from when the caller gives none.

- Carried (`stateful=True`, AllenNLP's behaviour): the state at the end of a batch, row by
  row; rows never seen start from zeros. A sentence's vectors depend on what came before it.
- Fixed point (`stateful=False`, with a biLM): every sentence starts from the biLM's own
  "between sentences" state, the fixed point of reading empty sentences (`<S> </S>`) with
  carried state. Vectors depend on the sentence alone (BENCHMARKS.md compares the two).
- Zero (`stateful=False`, an LSTM stack without a token layer to read `<S> </S>` with).

The object is shared by `ElmoLstm` (which asks it for every batch) and its `ElmoBiLm`; its
`get`/`set` are how the file engine saves and restores carried state across a resumed run.
"""
import logging
from typing import Callable, Iterable, Optional, Tuple

import torch

from elmo_plugin.kernels.products import Kernels
from elmo_plugin.kernels.reduced_precision import FLOAT32

logger = logging.getLogger(__name__)

LstmState = Tuple[torch.Tensor, torch.Tensor]

# The fixed point iteration's bounds; trained models converge well within them (BENCHMARKS.md).
_FIXED_POINT_TOLERANCE = 1e-6
_FIXED_POINT_MAX_ITERATIONS = 200


class BatchStartState:
    """
    # Parameters

    zero_state : `Callable[[int, torch.Tensor], LstmState]`
        `(batch_size, reference) ->` an all-zero state on `reference`'s device and dtype.
    stateful : `bool`, optional (default = `True`)
        Carry the state from batch to batch, or start every batch from `fixed_point`.
    fixed_point : `Callable[[], LstmState]`, optional
        The state of shape `(num_layers, 1, ...)` every row starts from when not stateful;
        zeros without one.
    """

    def __init__(
        self,
        zero_state: Callable[[int, torch.Tensor], LstmState],
        stateful: bool = True,
        fixed_point: Optional[Callable[[], LstmState]] = None,
    ) -> None:
        self._zero_state = zero_state
        self.stateful = stateful
        self.fixed_point = fixed_point
        self._carried: Optional[LstmState] = None

    def for_batch(self, batch_size: int, reference: torch.Tensor) -> LstmState:
        """The state a batch of `batch_size` rows starts from, on `reference`'s device and dtype."""
        if not self.stateful:
            if self.fixed_point is None:
                return self._zero_state(batch_size, reference)
            state, memory = self.fixed_point()
            return (
                state.to(reference.dtype).expand(-1, batch_size, -1),
                memory.to(reference.dtype).expand(-1, batch_size, -1),
            )
        zero_state = self._zero_state(batch_size, reference)
        if self._carried is None:
            return zero_state
        # AllenNLP's rows: row i continues row i of earlier batches; rows never seen start at 0.
        carried_rows = self._carried[0].size(1)
        return tuple(  # type: ignore
            torch.cat([carried.to(zero), zero[:, carried_rows:]], dim=1)[:, :batch_size]
            for carried, zero in zip(self._carried, zero_state)
        )

    def after_batch(self, final_state: LstmState) -> None:
        """Keeps a batch's final state for the next batch (when stateful)."""
        if not self.stateful:
            return
        final_state = (final_state[0].detach(), final_state[1].detach())
        if self._carried is None or self._carried[0].size(1) <= final_state[0].size(1):
            self._carried = final_state
        else:
            # Rows beyond this batch keep their state for a later, larger batch.
            batch_size = final_state[0].size(1)
            self._carried = tuple(  # type: ignore
                torch.cat([new, old[:, batch_size:].to(new)], dim=1)
                for new, old in zip(final_state, self._carried)
            )

    def reset(self) -> None:
        """Forgets the carried state: the next batch starts from zeros."""
        self._carried = None

    def get(self) -> Optional[LstmState]:
        """The carried state `(h, c)`, of shapes `(num_layers, rows, 2 * hidden)` and
        `(num_layers, rows, 2 * cell)`; `None` before the first batch or after `reset`."""
        return self._carried

    def set(self, state: Optional[LstmState]) -> None:
        """Continues from `state` (as `get` returned it, e.g. saved by an interrupted run)."""
        self._carried = None if state is None else (state[0].detach(), state[1].detach())


class BetweenSentencesState:
    """
    The fixed point of reading an empty sentence (`<S> </S>`) with carried state, shapes
    `(num_layers, 1, 2 * hidden)` and `(num_layers, 1, 2 * cell)`: the deterministic start
    state. Computed in float32 whatever the kernels' precision (in reduced precision the
    iteration need not converge, and the start state should not depend on the precision), and
    recomputed when any parameter changes.

    # Parameters

    read_empty_sentence : `Callable[[LstmState], LstmState]`
        One step of the iteration: the LSTM stack's final state after reading `<S> </S>`
        from the given state.
    zero_state : `Callable[[], LstmState]`
        Where the iteration starts.
    parameters : `Callable[[], Iterable[torch.nn.Parameter]]`
        The parameters the state depends on.
    kernels : `Kernels`
        The biLM's kernels (their precision is set to float32 during the iteration).
    """

    def __init__(
        self,
        read_empty_sentence: Callable[[LstmState], LstmState],
        zero_state: Callable[[], LstmState],
        parameters: Callable[[], Iterable[torch.nn.Parameter]],
        kernels: Kernels,
    ) -> None:
        self._read_empty_sentence = read_empty_sentence
        self._zero_state = zero_state
        self._parameters = parameters
        self._kernels = kernels
        self._state: Optional[LstmState] = None
        self._versions: Optional[Tuple[int, ...]] = None

    def __call__(self) -> LstmState:
        versions = tuple(parameter._version for parameter in self._parameters())
        if self._state is None or versions != self._versions:
            self._state = self._iterate()
            self._versions = versions
        return self._state

    def pin(self, state: LstmState) -> None:
        """Uses `state` instead of the fixed point until a parameter changes (experiments)."""
        self._state = state
        self._versions = tuple(parameter._version for parameter in self._parameters())

    @torch.no_grad()
    def _iterate(self) -> LstmState:
        with self._kernels.precision_set_to(FLOAT32):
            state = self._zero_state()
            change = float("inf")
            for _ in range(_FIXED_POINT_MAX_ITERATIONS):
                next_state = self._read_empty_sentence(state)
                change = max((new - old).abs().max().item() for new, old in zip(next_state, state))
                state = next_state
                if change < _FIXED_POINT_TOLERANCE:
                    return state
        logger.warning(
            "The biLM's between-sentence state did not converge in %d steps (last change "
            "%.2g); deterministic mode starts from the last iterate.",
            _FIXED_POINT_MAX_ITERATIONS,
            change,
        )
        return state
