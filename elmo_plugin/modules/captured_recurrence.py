"""
An LSTM cell's training steps, forward and written-out backward (`recorded_recurrence`), as
CUDA graphs (`elmo_plugin.kernels.cuda_graphs`).

A biLM's training step on a GPU is bound by the host launching kernels: each cell's steps are a
few dozen small kernels each, forward and backward, thousands per training step
(BENCHMARKS.md, "On an H200: training"). Packed training windows have one shape (streams x window, every
row a token at every position), so a cell's forward steps are one piece of work of a fixed
shape, and so is their backward: each is captured once and then replayed in one launch.

A graph reads and writes the same tensors at every replay: each call's tensors are copied into
buffers first, the forward's results (its outputs and the step values its backward reads) are
the graph's, and the caller gets copies of what it keeps. Because the next forward replay
overwrites the step values, a forward whose backward has not run yet holds them (`Claim`):
another forward of the same shape meanwhile runs without graphs, and a backward whose values
were overwritten since (a second backward through a retained graph after another forward)
refuses, naming `cuda_graphs`, instead of computing wrong gradients.

Each shape's forward and backward graphs share a memory pool of their own: the forward's step
values are alive when the backward is captured, and the backward's results are copied out at
once, so neither overwrites what the other still needs. Graphs of other shapes, replayed in any
order between them (a model that runs ELMo on two inputs before its backward pass), never
share that pool. Only the first `MOST_CAPTURED_SHAPES` shapes of a cell are captured (packed
windows have one); the others run the step loop instead of holding GPU memory per shape.
"""
import weakref
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

import torch

from elmo_plugin.kernels.cuda_graphs import GraphCache

# Shapes captured per cell (see the module).
MOST_CAPTURED_SHAPES = 4


class _Shape:
    """One shape's graphs (forward and backward, one memory pool), the buffers each reads, the
    forward's results, and the latest claim on them."""

    def __init__(self) -> None:
        self.graphs = GraphCache()
        self.buffers: Dict[str, Dict[str, Optional[torch.Tensor]]] = {}  # by part
        self.forward_results: Any = None
        self.latest_claim: Optional["weakref.ReferenceType[Claim]"] = None


class Claim:
    """One forward's hold on its shape's step values, until its backward has read them."""

    def __init__(self, shape: _Shape) -> None:
        self.shape = shape
        self.consumed = False


class CapturedRecurrence:
    """
    One cell's captured training steps, by shape.

    # Parameters

    capture : `bool`, optional (default = `True`)
        `False` runs the same buffered work without graphs, on any device: how the CPU tests
        the buffers, the claims and the values.
    """

    def __init__(self, capture: bool = True) -> None:
        self.capture = capture
        self._shapes: Dict[Hashable, _Shape] = {}

    def __len__(self) -> int:
        """The shapes whose steps ran buffered (captured, where `capture`)."""
        return len(self._shapes)

    def graphs_captured(self) -> int:
        """The graphs captured so far, forward and backward, over all shapes."""
        return sum(len(shape.graphs) for shape in self._shapes.values())

    # Copies (deepcopy, pickling) start empty: graphs and buffers are derived.
    def __getstate__(self) -> Dict[str, Any]:
        return {"capture": self.capture}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["capture"])

    def claim(
        self, enabled: bool, active_rows_at: List[int], precision: str, tensors: Dict[str, Optional[torch.Tensor]]
    ) -> Optional[Claim]:
        """
        A claim on the graph for these steps, or `None` where they run without one: graphs
        off, a row without a token somewhere, not on a GPU (when capturing), under autocast, a
        new shape beyond `MOST_CAPTURED_SHAPES`, or the graph's step values still held by a
        forward whose backward has not run.
        """
        projected_inputs, state = tensors["projected_inputs"], tensors["state"]
        # The device first: on the CPU (graphs on by default) no step's rows are looked at.
        if not enabled or (self.capture and (not projected_inputs.is_cuda or torch.is_autocast_enabled("cuda"))):
            return None
        if any(rows != state.size(0) for rows in active_rows_at):
            return None
        key = (tuple(projected_inputs.shape), projected_inputs.dtype, precision, tensors["dropout_mask"] is not None)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= MOST_CAPTURED_SHAPES:
                return None
            shape = self._shapes[key] = _Shape()
        holder = shape.latest_claim() if shape.latest_claim is not None else None
        if holder is not None and not holder.consumed:
            return None
        claim = Claim(shape)
        shape.latest_claim = weakref.ref(claim)
        return claim

    def forward(self, claim: Claim, run: Callable[..., Any], tensors: Dict[str, Optional[torch.Tensor]]) -> Any:
        """`run(**buffers)` with `tensors` copied into the buffers: its results (the graph's)."""
        shape = claim.shape
        buffers = self._copied_in(shape, "forward", tensors)
        shape.forward_results = self._replay(shape, "forward", lambda: run(**buffers))
        return shape.forward_results

    def backward(
        self, claim: Claim, run: Callable[..., Tuple[torch.Tensor, ...]], gradients: Dict[str, torch.Tensor]
    ) -> Tuple[torch.Tensor, ...]:
        """`run(forward_results, forward_buffers, **buffers)` with `gradients` copied into the
        buffers: copies of its results (autograd may keep a parameter's gradient as it is)."""
        shape = claim.shape
        if shape.latest_claim() is not claim:  # a later forward has replayed the graph since
            raise RuntimeError(
                "An LSTM cell's training steps ran as a CUDA graph whose saved values another forward pass "
                "has overwritten since (a second backward pass through a retained graph). Turn the graphs "
                "off for such training: `cuda_graphs = False` on the `ElmoLstm`."
            )
        claim.consumed = True
        forward_results, forward_buffers = shape.forward_results, shape.buffers["forward"]
        buffers = self._copied_in(shape, "backward", gradients)
        results = self._replay(shape, "backward", lambda: run(forward_results, forward_buffers, **buffers))
        return tuple(result.clone() for result in results)

    @staticmethod
    def _copied_in(shape: _Shape, part: str, tensors: Dict[str, Optional[torch.Tensor]]) -> Dict[str, Optional[torch.Tensor]]:
        buffers = shape.buffers.get(part)
        if buffers is None:
            buffers = shape.buffers[part] = {
                name: None if tensor is None else torch.empty_like(tensor, memory_format=torch.contiguous_format)
                for name, tensor in tensors.items()
            }
        for name, tensor in tensors.items():
            if tensor is not None:
                buffers[name].copy_(tensor)
        return buffers

    def _replay(self, shape: _Shape, part: str, work: Callable[[], Any]) -> Any:
        if not self.capture:
            return work()
        return shape.graphs.replay(part, work, mutated=())
