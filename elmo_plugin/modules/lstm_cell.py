"""
One direction of one layer of ELMo's LSTM: a cell whose output is a projection of its memory,
with cell and projection clipping (AllenNLP's `LstmCellWithProjection`, computed as below).
"""
from typing import List, Mapping, NamedTuple, Optional, Tuple

import numpy
import torch
from allennlp.nn.initializers import block_orthogonal
from allennlp.nn.util import get_dropout_mask
from torch.nn.utils import parametrize

from elmo_plugin.kernels.onednn import Product
from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.modules.captured_recurrence import CapturedRecurrence
from elmo_plugin.modules.recorded_recurrence import RecordedRecurrence, RecordedSteps, StepValues
from elmo_plugin.modules.start_state import LstmState
from elmo_plugin.weights import layout
from elmo_plugin.weights.parameter_mapping import Arrays, TfForgetBias, parameter_array


class Step(NamedTuple):
    """One step's values (`LstmCellWithProjection.step`), for some rows."""

    gates: Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # i, f, tanh g, o
    unclipped_memory: torch.Tensor  # (rows, cell)
    memory: torch.Tensor  # clipped
    squashed_memory: torch.Tensor  # tanh(c)
    output_memory: torch.Tensor  # o * tanh(c), the projection's input
    unclipped_state: torch.Tensor  # (rows, hidden)
    state: torch.Tensor  # clipped, before dropout


class LstmCellWithProjection(torch.nn.Module):
    """
    One direction of one layer: an LSTM whose output `h` is a projection of
    `o * tanh(c)` to `hidden_size`, with optional clipping of `c` and `h`.

    Unlike a naive loop over timesteps, the input-to-gate product is computed for every
    real token in one matrix product before the recurrence (it does not depend on the state),
    and each step computes only the rows whose sentence has not ended; the sum per gate is
    the same as AllenNLP's, so results agree to float rounding. Where gradients are recorded,
    the steps run in `RecordedRecurrence`, whose backward pass is written out; on a GPU, where
    every row has a token at every step, both passes run as CUDA graphs (`cuda_graphs`).

    # Parameters

    input_size : `int`
        Size of the input at each timestep.
    hidden_size : `int`
        Size of the projected output (and recurrent state `h`).
    cell_size : `int`
        Size of the memory cell `c`.
    go_forward : `bool`, optional (default = `True`)
        Direction of the recurrence.
    recurrent_dropout_probability : `float`, optional (default = `0.0`)
        Variational dropout on `h` (one mask per sequence), only in training mode.
    memory_cell_clip_value : `Optional[float]`, optional (default = `None`)
        Clip `c` to `[-value, value]`.
    state_projection_clip_value : `Optional[float]`, optional (default = `None`)
        Clip `h` to `[-value, value]`.
    kernels : `Kernels`, optional
        Computes the input, recurrent and projection products (the stack shares its own).
    cuda_graphs : `bool`, optional (default = `True`)
        In training on a GPU, replay the steps of batches without padding as CUDA graphs
        (`captured_recurrence`); the stack sets it for all its cells (`ElmoLstm.cuda_graphs`).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        cell_size: int,
        go_forward: bool = True,
        recurrent_dropout_probability: float = 0.0,
        memory_cell_clip_value: Optional[float] = None,
        state_projection_clip_value: Optional[float] = None,
        kernels: Optional[Kernels] = None,
        cuda_graphs: bool = True,
    ) -> None:
        super().__init__()
        self.cuda_graphs = cuda_graphs
        self.captured_steps = CapturedRecurrence()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.go_forward = go_forward
        self.recurrent_dropout_probability = recurrent_dropout_probability
        self.memory_cell_clip_value = memory_cell_clip_value
        self.state_projection_clip_value = state_projection_clip_value
        self.kernels = kernels or Kernels()
        # Parameter names are AllenNLP's, so that its model archives load into this module.
        self.input_linearity = torch.nn.Linear(input_size, 4 * cell_size, bias=False)
        self.state_linearity = torch.nn.Linear(hidden_size, 4 * cell_size, bias=True)
        self.state_projection = torch.nn.Linear(cell_size, hidden_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        block_orthogonal(self.input_linearity.weight.data, [self.cell_size, self.input_size])
        block_orthogonal(self.state_linearity.weight.data, [self.cell_size, self.hidden_size])
        self.state_linearity.bias.data.fill_(0.0)
        # Gate order is (input, forget, memory, output); a forget bias of 1 as in TF's LSTMCell.
        self.state_linearity.bias.data[self.cell_size : 2 * self.cell_size].fill_(1.0)

    def store_bias_as_in_file(self) -> None:
        """
        Re-parametrizes the gate bias with `TfForgetBias` (its parameter becomes
        `state_linearity.parametrizations.bias.original`); used when training a biLM that
        will be exported.
        """
        if not parametrize.is_parametrized(self.state_linearity, "bias"):
            requires_grad = self.state_linearity.bias.requires_grad
            parametrize.register_parametrization(
                self.state_linearity, "bias", TfForgetBias(self.cell_size)
            )
            self.state_linearity.parametrizations.bias.original.requires_grad = requires_grad

    @property
    def _bias_as_in_file(self) -> bool:
        return parametrize.is_parametrized(self.state_linearity, "bias")

    def forward(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, initial_state: LstmState
    ) -> Tuple[torch.Tensor, LstmState]:
        """
        # Parameters

        inputs : `torch.Tensor`
            `(batch_size, timesteps, input_size)`.
        mask : `torch.BoolTensor`
            `(batch_size, timesteps)`, True for real tokens; each row's True entries must be a
            prefix of the row.
        initial_state : `LstmState`
            `(h, c)` of shapes `(batch_size, hidden_size)` and `(batch_size, cell_size)`.

        # Returns

        The outputs `(batch_size, timesteps, hidden_size)`, zero at padded positions, and the
        final `(h, c)`: the state after each row's last real token (forward) or first one
        (backward). Rows keep their initial state through padding, so the backward direction
        starts every row at its own last token.
        """
        batch_size, timesteps = mask.shape
        input_product = self.kernels.product(Role.LSTM_INPUT, self.input_linearity)
        state, memory = initial_state
        dropout_mask = None
        if self.recurrent_dropout_probability > 0.0 and self.training:
            dropout_mask = get_dropout_mask(self.recurrent_dropout_probability, state)
        # Rows sorted by length (longest first) let each step compute only the rows still
        # inside their sentence, a prefix of the batch, instead of computing padding and
        # masking it away; the rows' results are put back in their original order at the end.
        lengths = mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        restore = torch.argsort(order)
        sorted_inputs, sorted_mask = inputs.index_select(0, order), mask.index_select(0, order)
        state, memory = state.index_select(0, order), memory.index_select(0, order)
        if dropout_mask is not None:
            dropout_mask = dropout_mask.index_select(0, order)
        # active_rows_at[t]: how many (sorted) rows have a token at position t.
        positions = torch.arange(timesteps, device=lengths.device)
        active_rows_at = (lengths.unsqueeze(1) > positions).sum(dim=0).tolist()
        # (real tokens, 4 * cell): the input products of real tokens only, in one matrix
        # product, time-major: step t's rows are the t-th block of active_rows_at[t] rows. No
        # product for padding, no copy of the wide result to reorder it.
        projected_inputs = input_product(sorted_inputs.transpose(0, 1)[sorted_mask.transpose(0, 1)])
        if torch.is_grad_enabled() and any(
            tensor.requires_grad for tensor in (projected_inputs, state, memory, *self.parameters())
        ):
            sorted_outputs, state, memory = RecordedRecurrence.apply(
                self,
                active_rows_at,
                dropout_mask,
                projected_inputs,
                state,
                memory,
                self.state_linearity.weight,
                self.state_linearity.bias,
                self.state_projection.weight,
            )
        else:
            sorted_outputs, state, memory = self.recurrence(
                projected_inputs,
                state,
                memory,
                dropout_mask,
                active_rows_at,
                self.kernels.product(Role.LSTM_RECURRENT, self.state_linearity, rows=batch_size),
                self.kernels.product(Role.LSTM_PROJECTION, self.state_projection),
            )
        return (
            sorted_outputs.index_select(0, restore),
            (state.index_select(0, restore), memory.index_select(0, restore)),
        )

    def recurrence(
        self,
        projected_inputs: torch.Tensor,
        state: torch.Tensor,
        memory: torch.Tensor,
        dropout_mask: Optional[torch.Tensor],
        active_rows_at: List[int],
        state_product: Product,
        state_projection: Product,
        record: Optional["RecordedSteps"] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        The steps of the recurrence over rows sorted by length (see `forward`).

        # Parameters

        projected_inputs : `torch.Tensor`
            `(real tokens, 4 * cell)`, time-major: step t's rows are the t-th block of
            `active_rows_at[t]` rows.
        state, memory : `torch.Tensor`
            The initial `(batch, hidden)` and `(batch, cell)` in the sorted row order.
        dropout_mask : `torch.Tensor`, optional
            `(batch, hidden)`, applied to `h` at every step.
        active_rows_at : `List[int]`
            The rows with a token at each position (a prefix of the sorted rows).
        state_product, state_projection : `Product`
            `h -> gates` (with the bias) and `o * tanh(c) -> h`.
        record : `RecordedSteps`, optional
            Keeps what the backward pass of `RecordedRecurrence` reads.

        # Returns

        The outputs `(batch, timesteps, hidden)` (zero where a row has no token), the final
        state and memory, all in the sorted row order.
        """
        batch_size, timesteps = state.size(0), len(active_rows_at)
        outputs: List[torch.Tensor] = [state.new_empty(0)] * timesteps
        steps_projected_inputs = projected_inputs.split(active_rows_at)
        for index in range(timesteps) if self.go_forward else reversed(range(timesteps)):
            active_rows = active_rows_at[index]
            if active_rows == 0:
                outputs[index] = state.new_zeros(batch_size, self.hidden_size)
                continue
            step = self.step(
                steps_projected_inputs[index], state[:active_rows], memory[:active_rows], state_product, state_projection
            )
            new_memory, clipped_state = step.memory, step.state
            new_state = clipped_state
            if dropout_mask is not None:
                new_state = clipped_state * dropout_mask[:active_rows]
            if record is not None:
                record.steps[index] = StepValues(
                    step.gates,
                    memory[:active_rows],
                    state[:active_rows],
                    step.squashed_memory,
                    step.output_memory,
                    self._within_clip(step.unclipped_memory, new_memory, self.memory_cell_clip_value),
                    self._within_clip(step.unclipped_state, clipped_state, self.state_projection_clip_value),
                )
            if active_rows == batch_size:
                memory, state, outputs[index] = new_memory, new_state, new_state
                continue
            memory = torch.cat([new_memory, memory[active_rows:]], dim=0)
            state = torch.cat([new_state, state[active_rows:]], dim=0)
            outputs[index] = torch.cat(
                [new_state, new_state.new_zeros(batch_size - active_rows, self.hidden_size)], dim=0
            )
        # (batch_size, timesteps, hidden)
        return torch.stack(outputs, dim=1), state, memory

    def step(
        self,
        projected_input: torch.Tensor,
        state: torch.Tensor,
        memory: torch.Tensor,
        state_product: Product,
        state_projection: Product,
    ) -> Step:
        """
        One step for some rows: `projected_input` `(rows, 4 * cell)` (the input product),
        `state` `(rows, hidden)` and `memory` `(rows, cell)` before it; the new state is
        clipped but not dropped out.
        """
        cell_size, tanh = self.cell_size, self.kernels.tanh
        # (rows, 4 * cell)
        gates = projected_input + state_product(state)
        # One sigmoid over all four blocks (the memory block's is not used) costs less than
        # three over a block each: at a step's few rows the cost is mostly per operation.
        input_gate, forget_gate, _, output_gate = torch.sigmoid(gates).split(cell_size, dim=1)
        memory_init = tanh(gates[:, 2 * cell_size : 3 * cell_size])
        # (rows, cell)
        unclipped_memory = input_gate * memory_init + forget_gate * memory
        new_memory = unclipped_memory
        if self.memory_cell_clip_value:
            new_memory = torch.clamp(new_memory, -self.memory_cell_clip_value, self.memory_cell_clip_value)
        squashed_memory = tanh(new_memory)
        output_memory = output_gate * squashed_memory
        # (rows, hidden)
        unclipped_state = state_projection(output_memory)
        new_state = unclipped_state
        if self.state_projection_clip_value:
            new_state = torch.clamp(
                unclipped_state, -self.state_projection_clip_value, self.state_projection_clip_value
            )
        return Step(
            (input_gate, forget_gate, memory_init, output_gate),
            unclipped_memory,
            new_memory,
            squashed_memory,
            output_memory,
            unclipped_state,
            new_state,
        )

    def masked_steps(
        self,
        projected_inputs: torch.Tensor,
        mask: torch.BoolTensor,
        state: torch.Tensor,
        memory: torch.Tensor,
        state_product: Product,
        state_projection: Product,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        The recurrence in fixed shapes (inference, no dropout): every step computes every row,
        and a row keeps its state where it has no token. The same values as `recurrence` (the
        same operations per row), in work whose shapes depend only on the batch's shape, so
        that it can be captured once and replayed (`elmo_plugin.kernels.cuda_graphs`).

        # Parameters

        projected_inputs : `torch.Tensor`
            `(rows, steps, 4 * cell)`, the input products.
        mask : `torch.BoolTensor`
            `(rows, steps)`, True where a row has a token (any pattern).
        state, memory : `torch.Tensor`
            `(rows, hidden)` and `(rows, cell)` before the first step (the last one backward).

        # Returns

        The outputs `(rows, steps, hidden)`, zero where a row has no token, and the state and
        memory after the steps.
        """
        steps = mask.size(1)
        outputs: List[torch.Tensor] = [state] * steps
        no_output = state.new_zeros(())
        for index in range(steps) if self.go_forward else reversed(range(steps)):
            step = self.step(projected_inputs[:, index], state, memory, state_product, state_projection)
            # (rows, 1): `where`, not a product with the mask, so that what a padded row
            # computes (from whatever its inputs hold) never reaches a result.
            has_token = mask[:, index : index + 1]
            memory = torch.where(has_token, step.memory, memory)
            state = torch.where(has_token, step.state, state)
            outputs[index] = torch.where(has_token, step.state, no_output)
        # (rows, steps, hidden)
        return torch.stack(outputs, dim=1), state, memory

    @staticmethod
    def _within_clip(
        unclipped: torch.Tensor, clipped: torch.Tensor, clip_value: Optional[float]
    ) -> Optional[torch.Tensor]:
        # 1.0 where `torch.clamp` passes the gradient through (bounds included: those values
        # are left as they are), 0.0 elsewhere. Float32, not bool: at a step's size PyTorch's
        # comparisons that write bool run several times slower than one that writes float32
        # (BENCHMARKS.md).
        if not clip_value:
            return None
        return torch.eq(clipped, unclipped, out=unclipped.new_empty(unclipped.shape))

    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray], group: str) -> Arrays:
        """The cell's parameters from the layout's datasets of cell `group`
        (`layout.lstm_cell_group`); a bias kept as in the file (`TfForgetBias`) stays so."""
        input_weight, state_weight, bias, projection_weight = layout.lstm_cell_parameters(
            arrays, group, self.input_size, add_forget_offset=not self._bias_as_in_file
        )
        bias_name = (
            "state_linearity.parametrizations.bias.original" if self._bias_as_in_file else "state_linearity.bias"
        )
        return {
            "input_linearity.weight": input_weight,
            "state_linearity.weight": state_weight,
            bias_name: bias,
            "state_projection.weight": projection_weight,
        }

    def arrays_from_parameters(self, group: str) -> Arrays:
        """The layout's datasets of cell `group` (inverse of `parameters_from_arrays`)."""
        if self._bias_as_in_file:
            bias = parameter_array(self.state_linearity.parametrizations.bias.original)
        else:
            bias = parameter_array(self.state_linearity.bias)
        return layout.lstm_cell_datasets(
            group,
            parameter_array(self.input_linearity.weight),
            parameter_array(self.state_linearity.weight),
            bias,
            parameter_array(self.state_projection.weight),
            bias_holds_forget_offset=not self._bias_as_in_file,
        )
