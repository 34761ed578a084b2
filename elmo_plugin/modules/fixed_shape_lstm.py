"""
ELMo's LSTM stack in pieces of fixed shape, for a GPU, where each piece is replayed as a CUDA
graph (`elmo_plugin.kernels.cuda_graphs`) instead of launched kernel by kernel.

`ElmoLstm`'s own loop computes, at each step, only the rows whose sentence has not ended, so
the shapes change from step to step and from batch to batch. Here the batch's rows are padded
to one of a few row counts (`padded_rows`) and its positions cut into chunks of a few lengths
(`chunk_lengths`); every step computes every row of the padded batch and a row without a token
keeps its state (`LstmCellWithProjection.masked_steps`). One direction's chunk, through all
layers, is one piece of work whose shapes depend only on (padded rows, chunk length): one graph
each, captured at its first use. The values are those of `ElmoLstm`'s loop (the same operations
per row; the products see more rows, which can round differently in the last bits).
"""
from typing import Any, Dict, Hashable, List, Optional, Tuple

import torch

from elmo_plugin.kernels.cuda_graphs import GraphCache
from elmo_plugin.kernels.onednn import Product
from elmo_plugin.kernels.products import Kernels
from elmo_plugin.kernels.roles import Role
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection
from elmo_plugin.modules.start_state import LstmState

# A batch's positions are cut into chunks of the longest length, then the rest in binary: each
# graph replays this many steps per launch, and there are few graphs per padded row count.
CHUNK_LENGTHS = (16, 8, 4, 2, 1)


def chunk_lengths(timesteps: int) -> List[int]:
    """`timesteps` as a sum of `CHUNK_LENGTHS`: longest chunks first, then the rest in binary."""
    longest = CHUNK_LENGTHS[0]
    lengths = [longest] * (timesteps // longest)
    rest = timesteps % longest
    for length in CHUNK_LENGTHS[1:]:
        if rest >= length:
            lengths.append(length)
            rest -= length
    return lengths


def padded_rows(rows: int) -> int:
    """The rows a batch of `rows` is computed in: a power of two up to 8, then a power of two or
    one and a half times one (at most a third of the rows padding, few distinct shapes)."""
    padded = 1
    while padded < rows:
        if padded >= 8 and padded * 3 // 2 >= rows:
            return padded * 3 // 2
        padded *= 2
    return padded


class _DirectionBuffers:
    """One direction's tensors for one padded row count: the state carried between chunks, and
    per chunk length the chunk's inputs and mask (what a graph reads)."""

    def __init__(self, layers: int, rows: int, hidden: int, cell: int, reference: torch.Tensor) -> None:
        # Zeros, not empty: padded rows are computed too, and stay finite this way. Ordinary
        # tensors even under inference mode, so that later calls outside it can write them.
        # Only the dtype and device of `reference` are kept: holding the tensor would keep the
        # batch it came from in memory.
        self._rows, self._dtype, self._device = rows, reference.dtype, reference.device
        self.state = self._zeros(layers, rows, hidden)
        self.memory = self._zeros(layers, rows, cell)
        self.chunks: Dict[int, Tuple[torch.Tensor, torch.BoolTensor]] = {}

    def _zeros(self, *shape: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        with torch.inference_mode(False):
            return torch.zeros(*shape, dtype=dtype or self._dtype, device=self._device)

    def chunk(self, length: int, input_size: int) -> Tuple[torch.Tensor, torch.BoolTensor]:
        if length not in self.chunks:
            self.chunks[length] = (
                self._zeros(self._rows, length, input_size),
                self._zeros(self._rows, length, dtype=torch.bool),
            )
        return self.chunks[length]


class FixedShapeLstm:
    """
    Runs an `ElmoLstm`'s directions over padded, fixed-shape chunks (see the module), inference
    only (no dropout, nothing recorded for gradients). `ElmoLstm` uses it on a GPU
    (`cuda_graphs`); on the CPU it runs the same work without graphs (`captured=False`), which
    is how its values are tested against the stack's own loop.

    # Parameters

    cells : `Tuple[List[LstmCellWithProjection], List[LstmCellWithProjection]]`
        The forward and the backward cells, bottom layer first.
    kernels : `Kernels`
        The stack's products.
    use_skip_connections : `bool`
        Add each layer's input to its output for layers above the first.
    """

    def __init__(
        self,
        cells: Tuple[List[LstmCellWithProjection], List[LstmCellWithProjection]],
        kernels: Kernels,
        use_skip_connections: bool,
    ) -> None:
        self.cells = cells
        self.kernels = kernels
        self.use_skip_connections = use_skip_connections
        self.graphs = GraphCache()
        self._buffers: Dict[Hashable, _DirectionBuffers] = {}
        self._weights_key: Optional[Hashable] = None

    # Copies (deepcopy, pickling) start without buffers or graphs: both are derived.
    def __getstate__(self) -> Dict[str, Any]:
        return {"cells": self.cells, "kernels": self.kernels, "use_skip_connections": self.use_skip_connections}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["cells"], state["kernels"], state["use_skip_connections"])

    def run(
        self,
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
        backward_inputs: torch.Tensor,
        backward_mask: torch.BoolTensor,
        captured: bool,
    ) -> Tuple[torch.Tensor, LstmState]:
        """
        `ElmoLstm.forward_with_state`: outputs `(layers, batch, timesteps, 2 * hidden)`, zero
        at padded positions, and the final state `(h, c)`, forward half first.
        """
        if captured:
            self._forget_graphs_of_other_weights()
        # The initial state's halves: (layers, batch, hidden) and (layers, batch, cell) each.
        states, memories = (half.chunk(2, dim=-1) for half in initial_state)
        directions = [
            self._direction(0, self.cells[0], inputs, mask, (states[0], memories[0]), captured),
            self._direction(1, self.cells[1], backward_inputs, backward_mask, (states[1], memories[1]), captured),
        ]
        (forward, forward_state, forward_memory), (backward, backward_state, backward_memory) = directions
        return torch.cat([forward, backward], -1), (
            torch.cat([forward_state, backward_state], -1),
            torch.cat([forward_memory, backward_memory], -1),
        )

    def _direction(
        self,
        direction: int,
        cells: List[LstmCellWithProjection],
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
        captured: bool,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One direction through all layers: outputs `(layers, batch, timesteps, hidden)`, final
        state and memory `(layers, batch, size)`."""
        rows, timesteps, input_size = inputs.shape
        padded = padded_rows(rows)
        buffers = self._direction_buffers(direction, cells, padded, inputs)
        buffers.state[:, :rows] = initial_state[0]
        buffers.memory[:, :rows] = initial_state[1]
        outputs = inputs.new_empty(len(cells), rows, timesteps, cells[0].hidden_size)
        # Made here, outside any capture, and held by the work a graph keeps: a graph reads a
        # derived weight (a precision's copy) at the address it had at the capture, so that copy
        # must live as long as the graph, whatever `Kernels` does with its own cache.
        products = [
            (
                self.kernels.product(Role.LSTM_INPUT, cell.input_linearity),
                self.kernels.product(Role.LSTM_RECURRENT, cell.state_linearity, rows=padded),
                self.kernels.product(Role.LSTM_PROJECTION, cell.state_projection),
            )
            for cell in cells
        ]
        starts, start = [], 0
        for length in chunk_lengths(timesteps):
            starts.append((start, length))
            start += length
        # The backward cells step from the last position to the first, chunk by chunk.
        for start, length in starts if cells[0].go_forward else reversed(starts):
            chunk_inputs, chunk_mask = buffers.chunk(length, input_size)
            chunk_inputs[:rows] = inputs[:, start : start + length]
            chunk_mask[:rows] = mask[:, start : start + length]
            chunk_mask[rows:] = False

            def work(chunk_inputs=chunk_inputs, chunk_mask=chunk_mask) -> torch.Tensor:
                return self._chunk(cells, products, chunk_inputs, chunk_mask, buffers.state, buffers.memory)

            if captured:
                key = (direction, padded, length, inputs.dtype)
                chunk_outputs = self.graphs.replay(key, work, (buffers.state, buffers.memory))
            else:
                chunk_outputs = work()
            outputs[:, :, start : start + length] = chunk_outputs[:, :rows]
        return outputs, buffers.state[:, :rows].clone(), buffers.memory[:, :rows].clone()

    def _chunk(
        self,
        cells: List[LstmCellWithProjection],
        products: List[Tuple[Product, Product, Product]],
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        states: torch.Tensor,
        memories: torch.Tensor,
    ) -> torch.Tensor:
        """One chunk of one direction through all layers, from and into `states`/`memories`
        `(layers, rows, size)`, with each cell's (input, recurrent, projection) products:
        outputs `(layers, rows, length, hidden)`."""
        layer_outputs = []
        for layer, (cell, (input_product, state_product, state_projection)) in enumerate(zip(cells, products)):
            # (rows, length, 4 * cell)
            projected_inputs = input_product(inputs)
            output, state, memory = cell.masked_steps(
                projected_inputs, mask, states[layer], memories[layer], state_product, state_projection
            )
            states[layer] = state
            memories[layer] = memory
            if layer > 0 and self.use_skip_connections:
                output = output + inputs
            layer_outputs.append(output)
            inputs = output
        return torch.stack(layer_outputs)

    def _direction_buffers(
        self, direction: int, cells: List[LstmCellWithProjection], rows: int, reference: torch.Tensor
    ) -> _DirectionBuffers:
        key = (direction, rows, reference.dtype, reference.device)
        if key not in self._buffers:
            self._buffers[key] = _DirectionBuffers(
                len(cells), rows, cells[0].hidden_size, cells[0].cell_size, reference
            )
        return self._buffers[key]

    def _forget_graphs_of_other_weights(self) -> None:
        # A graph reads the weights (and the precision's copies of them) where they were at its
        # capture: new weights, moved or converted ones, or another precision need new graphs,
        # and the buffers go with them (a graph writes the buffers it was captured with).
        weights_key = (
            self.kernels.precision,
            tuple(
                (parameter.data_ptr(), parameter._version, parameter.dtype)
                for cells in self.cells
                for cell in cells
                for parameter in cell.parameters()
            ),
        )
        if weights_key != self._weights_key:
            self.graphs.clear()
            self._buffers.clear()
            self._weights_key = weights_key
