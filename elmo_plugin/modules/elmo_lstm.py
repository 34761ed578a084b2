"""
ELMo's LSTM stack: separate forward and backward stacks of LSTM cells with a projected output,
cell and projection clipping, optional residual connections between layers.
"""
from typing import List, Mapping, NamedTuple, Optional, Tuple

import numpy
import torch
from allennlp.nn.initializers import block_orthogonal
from allennlp.nn.util import get_dropout_mask
from torch.autograd.function import once_differentiable
from torch.nn.utils import parametrize

from elmo_plugin.kernels import threads
from elmo_plugin.kernels.onednn import Product
from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.modules.start_state import BatchStartState, LstmState
from elmo_plugin.weights import layout
from elmo_plugin.weights.parameter_mapping import (
    Arrays,
    parameter_array,
    with_prefix,
)

# One direction's outputs per layer, final states per layer, final memories per layer.
DirectionResult = Tuple[List[torch.Tensor], List[torch.Tensor], List[torch.Tensor]]


class TfForgetBias(torch.nn.Module):
    """
    A parametrization (`torch.nn.utils.parametrize`) of an LSTM cell's gate bias that stores it
    as the published weight files do: without TF's forget bias of 1.0. The cell's effective
    bias is the stored one plus 1.0 on the forget block, added in float32 exactly as the
    loaders (AllenNLP's and ours) add it when they read a file. A bias trained this way is
    written to a file unchanged and read back bit-identical; a bias trained with the 1.0
    folded in could not be, since `b - 1.0` rounds to a coarser float32 grid than `b`.

    # Parameters

    cell_size : `int`
        The cell's memory size; gates are in the order (input, forget, memory, output).
    """

    def __init__(self, cell_size: int) -> None:
        super().__init__()
        offset = torch.zeros(4 * cell_size, dtype=torch.float32)
        offset[cell_size : 2 * cell_size] = layout.TF_FORGET_BIAS
        self.register_buffer("offset", offset, persistent=False)

    # In float32 whatever the module's dtype (`.double()` converts the offset buffer too).
    def forward(self, stored_bias: torch.Tensor) -> torch.Tensor:
        return (stored_bias.float() + self.offset.float()).to(stored_bias.dtype)

    def right_inverse(self, effective_bias: torch.Tensor) -> torch.Tensor:
        return (effective_bias.float() - self.offset.float()).to(effective_bias.dtype)


class LstmCellWithProjection(torch.nn.Module):
    """
    One direction of one layer: an LSTM whose output `h` is a projection of
    `o * tanh(c)` to `hidden_size`, with optional clipping of `c` and `h`.

    Unlike a naive loop over timesteps, the input-to-gate product is computed for every
    real token in one matrix product before the recurrence (it does not depend on the state),
    and each step computes only the rows whose sentence has not ended; the sum per gate is
    the same as AllenNLP's, so results agree to float rounding. Where gradients are recorded,
    the steps run in `RecordedRecurrence`, whose backward pass is written out.

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
    ) -> None:
        super().__init__()
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
        cell_size = self.cell_size
        outputs: List[torch.Tensor] = [state.new_empty(0)] * timesteps
        steps_projected_inputs = projected_inputs.split(active_rows_at)
        for index in range(timesteps) if self.go_forward else reversed(range(timesteps)):
            active_rows = active_rows_at[index]
            if active_rows == 0:
                outputs[index] = state.new_zeros(batch_size, self.hidden_size)
                continue
            # (active_rows, 4 * cell)
            gates = steps_projected_inputs[index] + state_product(state[:active_rows])
            input_gate, forget_gate, memory_init, output_gate = gates.split(cell_size, dim=1)
            input_gate = torch.sigmoid(input_gate)
            forget_gate = torch.sigmoid(forget_gate)
            memory_init = torch.tanh(memory_init)
            output_gate = torch.sigmoid(output_gate)
            # (active_rows, cell)
            unclipped_memory = input_gate * memory_init + forget_gate * memory[:active_rows]
            new_memory = unclipped_memory
            if self.memory_cell_clip_value:
                new_memory = torch.clamp(
                    new_memory, -self.memory_cell_clip_value, self.memory_cell_clip_value
                )
            squashed_memory = torch.tanh(new_memory)
            output_memory = output_gate * squashed_memory
            # (active_rows, hidden)
            unclipped_state = state_projection(output_memory)
            new_state = unclipped_state
            if self.state_projection_clip_value:
                new_state = torch.clamp(
                    new_state, -self.state_projection_clip_value, self.state_projection_clip_value
                )
            if dropout_mask is not None:
                new_state = new_state * dropout_mask[:active_rows]
            if record is not None:
                record.steps[index] = StepValues(
                    (input_gate, forget_gate, memory_init, output_gate),
                    memory[:active_rows],
                    state[:active_rows],
                    squashed_memory,
                    output_memory,
                    self._within_clip(unclipped_memory, self.memory_cell_clip_value),
                    self._within_clip(unclipped_state, self.state_projection_clip_value),
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

    @staticmethod
    def _within_clip(values: torch.Tensor, clip_value: Optional[float]) -> Optional[torch.Tensor]:
        # Where `torch.clamp` passes the gradient through (bounds included).
        if not clip_value:
            return None
        return (values >= -clip_value) & (values <= clip_value)

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


# Autograd's own derivatives of sigmoid and tanh from their outputs, `gradient * y * (1 - y)`
# and `gradient * (1 - y * y)`, one operation each; the `_into` forms write into a given tensor.
_tanh_backward = torch.ops.aten.tanh_backward
_tanh_backward_into = torch.ops.aten.tanh_backward.grad_input
_sigmoid_backward_into = torch.ops.aten.sigmoid_backward.grad_input


class StepValues(NamedTuple):
    """What one step of `LstmCellWithProjection.recurrence` keeps for the backward pass."""

    gates: Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # i, f, tanh g, o
    previous_memory: torch.Tensor  # (active rows, cell)
    previous_state: torch.Tensor  # (active rows, hidden)
    squashed_memory: torch.Tensor  # tanh(c)
    output_memory: torch.Tensor  # o * tanh(c), the projection's input
    memory_within_clip: Optional[torch.Tensor]  # bool, None without clipping
    state_within_clip: Optional[torch.Tensor]


class RecordedSteps:
    """The steps' values, by position (the backward direction fills them from the end)."""

    def __init__(self, timesteps: int) -> None:
        self.steps: List[Optional[StepValues]] = [None] * timesteps


class RecordedRecurrence(torch.autograd.Function):
    """
    `LstmCellWithProjection.recurrence` where gradients are recorded (training), with its
    backward pass written out. Autograd would record a dozen operations per step and, per
    step, multiply each weight's gradient by that step's few rows; here the steps' gate
    gradients land in one `(real tokens, 4 * cell)` tensor, which is the gradient of the
    projected inputs, and each weight's gradient is one product over all steps.

    `apply(cell, active_rows_at, dropout_mask, projected_inputs, state, memory, state_weight,
    state_bias, projection_weight)`, in the sorted row order of `recurrence`, returns its
    outputs, final state and final memory.
    """

    @staticmethod
    def forward(
        ctx,
        cell: LstmCellWithProjection,
        active_rows_at: List[int],
        dropout_mask: Optional[torch.Tensor],
        projected_inputs: torch.Tensor,
        state: torch.Tensor,
        memory: torch.Tensor,
        state_weight: torch.Tensor,
        state_bias: torch.Tensor,
        projection_weight: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        record = RecordedSteps(len(active_rows_at))
        outputs, final_state, final_memory = cell.recurrence(
            projected_inputs,
            state,
            memory,
            dropout_mask,
            active_rows_at,
            lambda rows: torch.nn.functional.linear(rows, state_weight, state_bias),
            lambda rows: torch.nn.functional.linear(rows, projection_weight),
            record,
        )
        ctx.cell, ctx.record, ctx.dropout_mask, ctx.active_rows_at = cell, record, dropout_mask, active_rows_at
        ctx.save_for_backward(state_weight, projection_weight)
        # An output is never an input itself (no step had a row).
        return outputs, final_state.clone() if final_state is state else final_state, (
            final_memory.clone() if final_memory is memory else final_memory
        )

    @staticmethod
    @once_differentiable
    def backward(ctx, outputs_gradient: torch.Tensor, final_state_gradient: torch.Tensor, final_memory_gradient: torch.Tensor):
        state_weight, projection_weight = ctx.saved_tensors
        cell, steps, dropout_mask, active_rows_at = ctx.cell, ctx.record.steps, ctx.dropout_mask, ctx.active_rows_at
        cell_size = cell.cell_size
        # The gradients of h and c carried back through the steps (rows past a sentence's end
        # keep theirs: their state passes those steps unchanged).
        state_gradient = final_state_gradient.clone()
        memory_gradient = final_memory_gradient.clone()
        # (real tokens, 4 * cell) and (real tokens, hidden), time-major as `projected_inputs`
        gates_gradient = outputs_gradient.new_empty(sum(active_rows_at), 4 * cell_size)
        unclipped_state_gradient = outputs_gradient.new_empty(sum(active_rows_at), cell.hidden_size)
        step_starts = numpy.cumsum([0] + active_rows_at[:-1]).tolist()
        timesteps = len(active_rows_at)
        for index in reversed(range(timesteps)) if cell.go_forward else range(timesteps):
            active_rows = active_rows_at[index]
            if active_rows == 0:
                continue
            step = steps[index]
            step_rows = slice(step_starts[index], step_starts[index] + active_rows)
            # (active_rows, hidden)
            d_state = state_gradient[:active_rows] + outputs_gradient[:active_rows, index]
            if dropout_mask is not None:
                d_state = d_state * dropout_mask[:active_rows]
            if step.state_within_clip is not None:
                d_state = torch.where(step.state_within_clip, d_state, 0.0)
            unclipped_state_gradient[step_rows] = d_state
            # (active_rows, cell)
            d_output_memory = d_state @ projection_weight
            input_gate, forget_gate, memory_init, output_gate = step.gates
            d_memory = memory_gradient[:active_rows] + _tanh_backward(
                d_output_memory * output_gate, step.squashed_memory
            )
            if step.memory_within_clip is not None:
                d_memory = torch.where(step.memory_within_clip, d_memory, 0.0)
            # (active_rows, 4 * cell): the gradients before each gate's nonlinearity
            step_gates_gradient = gates_gradient[step_rows]
            d_input, d_forget, d_memory_init, d_output = step_gates_gradient.split(cell_size, dim=1)
            _sigmoid_backward_into(d_memory * memory_init, input_gate, grad_input=d_input)
            _sigmoid_backward_into(d_memory * step.previous_memory, forget_gate, grad_input=d_forget)
            _tanh_backward_into(d_memory * input_gate, memory_init, grad_input=d_memory_init)
            _sigmoid_backward_into(d_output_memory * step.squashed_memory, output_gate, grad_input=d_output)
            torch.mul(d_memory, forget_gate, out=memory_gradient[:active_rows])
            torch.mm(step_gates_gradient, state_weight, out=state_gradient[:active_rows])
        # Each weight's gradient over all steps at once, in the time-major row order.
        recorded = [steps[index] for index in range(timesteps) if active_rows_at[index] > 0]
        previous_states = torch.cat([step.previous_state for step in recorded])
        output_memories = torch.cat([step.output_memory for step in recorded])
        return (
            None,
            None,
            None,
            gates_gradient,
            state_gradient,
            memory_gradient,
            gates_gradient.t() @ previous_states,
            gates_gradient.sum(dim=0),
            unclipped_state_gradient.t() @ output_memories,
        )


class ElmoLstm(torch.nn.Module):
    """
    The biLM's contextual layers: `num_layers` forward cells and `num_layers` backward cells.
    The directions never see each other's outputs; layer `l > 0` of a direction reads that
    direction's layer `l - 1` (plus a residual connection if `use_skip_connections`).

    `forward` starts a batch from `batch_start_state` (carried from the previous batch by
    default, as AllenNLP's `ElmoLstm`; `ElmoBiLm` sets its own policy); `forward_with_state`
    starts from a state the caller keeps (the biLM model in training).

    # Parameters

    input_size : `int`
        Size of the token representations.
    hidden_size : `int`
        Output size of each cell (the biLM's projection size).
    cell_size : `int`
        Memory cell size.
    num_layers : `int`
        Layers per direction.
    requires_grad : `bool`, optional (default = `False`)
        Whether the parameters are trained.
    recurrent_dropout_probability : `float`, optional (default = `0.0`)
        See `LstmCellWithProjection`.
    memory_cell_clip_value : `Optional[float]`, optional (default = `None`)
        See `LstmCellWithProjection`.
    state_projection_clip_value : `Optional[float]`, optional (default = `None`)
        See `LstmCellWithProjection`.
    use_skip_connections : `bool`, optional (default = `True`)
        Add each layer's input to its output for layers above the first.
    input_dropout_probability : `float`, optional (default = `0.0`)
        Dropout on every layer's input (the token representations for the first), only in
        training mode; a residual connection adds the dropped-out input, as in bilm-tf, where
        each cell is `DropoutWrapper(ResidualWrapper(cell), input_keep_prob)`.
    parallel_directions : `bool`, optional (default = `True`)
        Where no autograd graph is recorded and nothing random happens, on the CPU, run the
        backward direction in a second thread beside the forward one (see
        `elmo_plugin.kernels.threads`: it halves the process-wide torch thread count for the
        duration of the call, so turn this off if other threads run torch work at the same
        time). Also an attribute, settable any time.
    kernels : `Kernels`, optional
        Computes the cells' products (`ElmoBiLm` shares its own).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        cell_size: int,
        num_layers: int,
        requires_grad: bool = False,
        recurrent_dropout_probability: float = 0.0,
        memory_cell_clip_value: Optional[float] = None,
        state_projection_clip_value: Optional[float] = None,
        use_skip_connections: bool = True,
        input_dropout_probability: float = 0.0,
        parallel_directions: bool = True,
        kernels: Optional[Kernels] = None,
    ) -> None:
        super().__init__()
        self.parallel_directions = parallel_directions
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.num_layers = num_layers
        self.use_skip_connections = use_skip_connections
        self.kernels = kernels or Kernels()
        self.batch_start_state = BatchStartState(self.zero_state)
        self._input_dropout = torch.nn.Dropout(input_dropout_probability)
        self.forward_layers: List[LstmCellWithProjection] = []
        self.backward_layers: List[LstmCellWithProjection] = []
        layer_input_size = input_size
        for layer_index in range(num_layers):
            for go_forward, layers in ((True, self.forward_layers), (False, self.backward_layers)):
                cell = LstmCellWithProjection(
                    layer_input_size,
                    hidden_size,
                    cell_size,
                    go_forward,
                    recurrent_dropout_probability,
                    memory_cell_clip_value,
                    state_projection_clip_value,
                    kernels=self.kernels,
                )
                direction = "forward" if go_forward else "backward"
                self.add_module(f"{direction}_layer_{layer_index}", cell)
                layers.append(cell)
            layer_input_size = hidden_size
        for parameter in self.parameters():
            parameter.requires_grad = requires_grad

    def zero_state(self, batch_size: int, reference: torch.Tensor) -> LstmState:
        """An all-zero state of the shape `forward` takes, on `reference`'s device and dtype."""
        return (
            reference.new_zeros(self.num_layers, batch_size, 2 * self.hidden_size),
            reference.new_zeros(self.num_layers, batch_size, 2 * self.cell_size),
        )

    def reset_states(self) -> None:
        """Forgets the carried state (AllenNLP's method): the next batch starts from zeros."""
        self.batch_start_state.reset()

    def store_biases_as_in_file(self) -> None:
        """Re-parametrizes every cell's gate bias with `TfForgetBias` (for training to export)."""
        for cell in self.forward_layers + self.backward_layers:
            cell.store_bias_as_in_file()

    def forward(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        """
        AllenNLP's `ElmoLstm.forward`: the batch starts from `batch_start_state`, which then
        keeps its final state.

        # Parameters

        inputs : `torch.Tensor`
            `(batch_size, timesteps, input_size)`.
        mask : `torch.BoolTensor`
            `(batch_size, timesteps)`, a prefix of True per row.

        # Returns

        Outputs `(num_layers, batch_size, timesteps, 2 * hidden_size)`, forward half first,
        zero at padded positions.
        """
        initial_state = self.batch_start_state.for_batch(mask.size(0), inputs)
        outputs, final_state = self.forward_with_state(inputs, mask, initial_state)
        self.batch_start_state.after_batch(final_state)
        return outputs

    def forward_with_state(
        self,
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
        backward_inputs: Optional[torch.Tensor] = None,
        backward_mask: Optional[torch.BoolTensor] = None,
    ) -> Tuple[torch.Tensor, LstmState]:
        """
        The stack from a state the caller keeps (the biLM model in training, the fixed point
        iteration); `batch_start_state` is not touched.

        # Parameters

        inputs : `torch.Tensor`
            `(batch_size, timesteps, input_size)`.
        mask : `torch.BoolTensor`
            `(batch_size, timesteps)`, a prefix of True per row.
        initial_state : `LstmState`
            `(h, c)` of shapes `(num_layers, batch_size, 2 * hidden_size)` and
            `(num_layers, batch_size, 2 * cell_size)`, forward half first (AllenNLP's layout).
        backward_inputs : `torch.Tensor`, optional (default = `inputs`)
            What the backward cells read, of the shape of `inputs`. A biLM in training reads
            different positions (or different text) in each direction: the forward LM the
            tokens before each target, the backward LM the tokens after it.
        backward_mask : `torch.BoolTensor`, optional (default = `mask`)
            The mask of `backward_inputs`.

        # Returns

        Outputs `(num_layers, batch_size, timesteps, 2 * hidden_size)` (forward half first, zero
        at padded positions) and the final state in the layout of `initial_state`.
        """
        if backward_inputs is None:
            backward_inputs, backward_mask = inputs, mask
        elif backward_mask is None:
            backward_mask = mask
        initial_states, initial_memories = initial_state
        forward_start = (
            initial_states[..., : self.hidden_size],
            initial_memories[..., : self.cell_size],
        )
        backward_start = (
            initial_states[..., self.hidden_size :],
            initial_memories[..., self.cell_size :],
        )

        def forward_direction() -> DirectionResult:
            return self._run_direction(self.forward_layers, inputs, mask, forward_start)

        def backward_direction() -> DirectionResult:
            return self._run_direction(
                self.backward_layers, backward_inputs, backward_mask, backward_start
            )

        if self._directions_in_parallel(inputs, backward_inputs):
            forward, backward = threads.run_side_by_side(forward_direction, backward_direction)
        else:
            forward, backward = forward_direction(), backward_direction()
        outputs, final_states, final_memories = (
            torch.stack([torch.cat(pair, -1) for pair in zip(forward_part, backward_part)])
            for forward_part, backward_part in zip(forward, backward)
        )
        return outputs, (final_states, final_memories)

    def _run_direction(
        self,
        cells: List[LstmCellWithProjection],
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
    ) -> DirectionResult:
        """One direction through all layers, from `initial_state` `(num_layers, batch, size)`."""
        initial_states, initial_memories = initial_state
        layer_outputs, final_states, final_memories = [], [], []
        for layer_index, cell in enumerate(cells):
            if self._input_dropout.p > 0.0:
                inputs = self._input_dropout(inputs)
            output, (state, memory) = cell(
                inputs, mask, (initial_states[layer_index], initial_memories[layer_index])
            )
            if layer_index > 0 and self.use_skip_connections:
                output = output + inputs
            layer_outputs.append(output)
            final_states.append(state)
            final_memories.append(memory)
            inputs = output
        return layer_outputs, final_states, final_memories

    def _directions_in_parallel(self, inputs: torch.Tensor, backward_inputs: torch.Tensor) -> bool:
        if not self.parallel_directions:
            return False
        records_graph = torch.is_grad_enabled() and (
            inputs.requires_grad
            or backward_inputs.requires_grad
            or any(parameter.requires_grad for parameter in self.parameters())
        )
        draws_random_numbers = self.training and (
            self._input_dropout.p > 0.0
            or any(cell.recurrent_dropout_probability > 0.0 for cell in self.forward_layers)
        )
        return threads.can_run_side_by_side(inputs.device, records_graph, draws_random_numbers)

    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """Every cell's parameters from the layout's `RNN_{direction}/.../Cell{layer}` datasets."""
        values: Arrays = {}
        for direction, direction_name in enumerate(layout.DIRECTIONS):
            for layer in range(self.num_layers):
                cell = getattr(self, f"{direction_name}_layer_{layer}")
                group = layout.lstm_cell_group(direction, layer)
                values.update(
                    with_prefix(f"{direction_name}_layer_{layer}", cell.parameters_from_arrays(arrays, group))
                )
        return values

    def arrays_from_parameters(self) -> Arrays:
        """The layout's LSTM datasets (inverse of `parameters_from_arrays`)."""
        arrays: Arrays = {}
        for direction, cells in enumerate((self.forward_layers, self.backward_layers)):
            for layer, cell in enumerate(cells):
                arrays.update(cell.arrays_from_parameters(layout.lstm_cell_group(direction, layer)))
        return arrays

    # AllenNLP 0.9 and 2.x client code reads and clears the carried state through `_states`.
    @property
    def _states(self) -> Optional[LstmState]:
        return self.batch_start_state.get()

    @_states.setter
    def _states(self, state: Optional[LstmState]) -> None:
        self.batch_start_state.set(state)
