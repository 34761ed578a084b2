"""
ELMo's LSTM stack: separate forward and backward stacks of LSTM cells with a projected output,
cell and projection clipping, optional residual connections between layers.
"""
import os
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Dict, List, Optional, Tuple

import torch
from allennlp.nn.initializers import block_orthogonal
from allennlp.nn.util import get_dropout_mask
from torch.nn.utils import parametrize

from elmo_plugin.modules.cpu_linear import linear
from elmo_plugin.modules.reduced_precision import FLOAT32, PackedLinear, packed
from elmo_plugin.weights.layout import TF_FORGET_BIAS

LstmState = Tuple[torch.Tensor, torch.Tensor]
# One direction's outputs per layer, final states per layer, final memories per layer.
DirectionResult = Tuple[List[torch.Tensor], List[torch.Tensor], List[torch.Tensor]]

# Per process (pid, executor): runs the backward direction while the calling thread runs the
# forward one (`ElmoLstm.parallel_directions`).
_backward_direction_worker: Optional[Tuple[int, ThreadPoolExecutor]] = None


def _backward_direction_executor() -> ThreadPoolExecutor:
    # A forked child (e.g. a data-loader worker) inherits the executor but not its thread,
    # and work submitted to it would wait forever: each process makes its own.
    global _backward_direction_worker
    if _backward_direction_worker is None or _backward_direction_worker[0] != os.getpid():
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-backward-direction")
        _backward_direction_worker = (os.getpid(), executor)
    return _backward_direction_worker[1]


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
        offset[cell_size : 2 * cell_size] = TF_FORGET_BIAS
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
    the same as AllenNLP's, so results agree to float rounding.

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
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.go_forward = go_forward
        self.recurrent_dropout_probability = recurrent_dropout_probability
        self.memory_cell_clip_value = memory_cell_clip_value
        self.state_projection_clip_value = state_projection_clip_value
        # Parameter names are AllenNLP's, so that its model archives load into this module.
        self.input_linearity = torch.nn.Linear(input_size, 4 * cell_size, bias=False)
        self.state_linearity = torch.nn.Linear(hidden_size, 4 * cell_size, bias=True)
        self.state_projection = torch.nn.Linear(cell_size, hidden_size, bias=False)
        self.reset_parameters()
        # Reduced-precision copies of the three products for inference (`set_precision`).
        self._packed: Dict[str, PackedLinear] = {}
        # (weight identity and version, MKL-packed recurrent weight) for batch-1 inference.
        self._mkl_packed: Optional[Tuple[Tuple[int, int], torch.Tensor]] = None

    def set_precision(self, precision: str) -> None:
        """
        Inference in `precision` (see `reduced_precision`): packed copies of the current
        weights, used by `forward` from now on; `"float32"` goes back to the parameters.
        """
        self._packed = {}
        if precision != FLOAT32:
            self._packed = {
                "input": packed(self.input_linearity, precision),
                "state": packed(self.state_linearity, precision),
                "projection": packed(self.state_projection, precision),
            }

    def reset_parameters(self) -> None:
        block_orthogonal(self.input_linearity.weight.data, [self.cell_size, self.input_size])
        block_orthogonal(self.state_linearity.weight.data, [self.cell_size, self.hidden_size])
        self.state_linearity.bias.data.fill_(0.0)
        # Gate order is (input, forget, memory, output); a forget bias of 1 as in TF's LSTMCell.
        self.state_linearity.bias.data[self.cell_size : 2 * self.cell_size].fill_(1.0)

    def _mkl_packed_state_weight(
        self, batch_size: int, state_weight: torch.Tensor
    ) -> Optional[torch.Tensor]:
        """
        For one sentence at a time in float32 inference on the CPU: the recurrent weight
        re-laid out by MKL for single-row products (`torch.ops.mkl`, the packing PyTorch's
        own CPU inference compiler uses), which halves the time of the step's largest
        product (BENCHMARKS.md). Made once and kept until the weight changes; `None` where
        it does not apply (training, gradients, batches, other devices and dtypes).
        """
        if (
            batch_size != 1
            or torch.is_grad_enabled()
            or state_weight.device.type != "cpu"
            or state_weight.dtype != torch.float32
            or not torch.backends.mkl.is_available()
        ):
            return None
        key = (state_weight.data_ptr(), state_weight._version)
        if self._mkl_packed is None or self._mkl_packed[0] != key:
            self._mkl_packed = (key, torch.ops.mkl._mkl_reorder_linear_weight(state_weight, 1))
        return self._mkl_packed[1]

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
        timesteps = inputs.size(1)
        cell_size = self.cell_size
        if self._packed:
            input_product = self._packed["input"]
            state_product = self._packed["state"]
            state_projection = self._packed["projection"]
        else:
            # The projection stays `functional.linear`: a narrow product with long sums, which
            # oneDNN adds up less accurately (`cpu_linear`) at no gain in time.
            state_projection = self.state_projection
            input_weight = self.input_linearity.weight
            # Fetched once: a parametrized bias (`TfForgetBias`) is recomputed on every access.
            state_weight, state_bias = self.state_linearity.weight, self.state_linearity.bias
            packed_weight = self._mkl_packed_state_weight(inputs.size(0), state_weight)

            def input_product(inputs: torch.Tensor) -> torch.Tensor:
                return linear(inputs, input_weight)

            def state_product(state: torch.Tensor) -> torch.Tensor:
                if packed_weight is not None:
                    return torch.ops.mkl._mkl_linear(state, packed_weight, state_weight, state_bias, 1)
                return linear(state, state_weight, state_bias)

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
        # The input products of real tokens only, in one matrix product, time-major: step t's
        # rows are the t-th block. No product for padding, no copy of the (4 x cell_size)-wide
        # result to reorder it, and in training one gradient concatenation for all steps (a
        # slice per step would give every step a zero-filled gradient of the whole result).
        projected_inputs = input_product(
            sorted_inputs.transpose(0, 1)[sorted_mask.transpose(0, 1)]
        ).split(active_rows_at)
        batch_size = lengths.size(0)
        outputs: List[torch.Tensor] = [inputs.new_empty(0)] * timesteps
        for index in range(timesteps) if self.go_forward else reversed(range(timesteps)):
            active_rows = active_rows_at[index]
            if active_rows == 0:
                outputs[index] = inputs.new_zeros(batch_size, self.hidden_size)
                continue
            gates = projected_inputs[index] + state_product(state[:active_rows])
            # One split, not four slices: in training, a slice's gradient is a zero-filled
            # tensor of the whole `gates`; a split's gradients are concatenated once.
            input_gate, forget_gate, memory_init, output_gate = gates.split(cell_size, dim=1)
            input_gate = torch.sigmoid(input_gate)
            forget_gate = torch.sigmoid(forget_gate)
            memory_init = torch.tanh(memory_init)
            output_gate = torch.sigmoid(output_gate)
            new_memory = input_gate * memory_init + forget_gate * memory[:active_rows]
            if self.memory_cell_clip_value:
                new_memory = torch.clamp(
                    new_memory, -self.memory_cell_clip_value, self.memory_cell_clip_value
                )
            new_state = state_projection(output_gate * torch.tanh(new_memory))
            if self.state_projection_clip_value:
                new_state = torch.clamp(
                    new_state, -self.state_projection_clip_value, self.state_projection_clip_value
                )
            if dropout_mask is not None:
                new_state = new_state * dropout_mask[:active_rows]
            if active_rows == batch_size:
                memory, state, outputs[index] = new_memory, new_state, new_state
                continue
            memory = torch.cat([new_memory, memory[active_rows:]], dim=0)
            state = torch.cat([new_state, state[active_rows:]], dim=0)
            outputs[index] = torch.cat(
                [new_state, new_state.new_zeros(batch_size - active_rows, self.hidden_size)], dim=0
            )
        sorted_outputs = torch.stack(outputs, dim=1)
        return (
            sorted_outputs.index_select(0, restore),
            (state.index_select(0, restore), memory.index_select(0, restore)),
        )


class ElmoLstm(torch.nn.Module):
    """
    The biLM's contextual layers: `num_layers` forward cells and `num_layers` backward cells.
    The directions never see each other's outputs; layer `l > 0` of a direction reads that
    direction's layer `l - 1` (plus a residual connection if `use_skip_connections`).

    This module holds no state between calls; `ElmoBiLm` decides what state a batch starts
    from (carried over from the previous batch, or a fixed one).

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
        On CPU with two or more threads, run the backward direction in a second thread while
        the calling thread runs the forward one, each with half of `torch.get_num_threads()`
        (restored afterwards; a process-wide setting, so turn this off if other threads run
        torch work at the same time). Only where no autograd graph is recorded and nothing
        random happens (no dropout in training mode), so results do not depend on thread
        timing. Worth 1.15-1.5x for one sentence at a time on two cores: per step, each
        direction's single-row products and element-wise operations are too small to split
        across cores, and two of them side by side keep both cores busy (from 16 rows up,
        oneDNN's products use both cores by themselves and it gains 1.0-1.14x). Not on a GPU,
        where the per-step kernels are so small that the GPU mostly waits for the host to
        launch them: a second thread launching the backward direction on a second CUDA stream
        was tried and measured 0.79-1.04x of the serial loop (Python's GIL serialises the
        launches; BENCHMARKS.md). Also an attribute, settable any time.
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
    ) -> None:
        super().__init__()
        self.parallel_directions = parallel_directions
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.cell_size = cell_size
        self.num_layers = num_layers
        self.use_skip_connections = use_skip_connections
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

    def store_biases_as_in_file(self) -> None:
        """Re-parametrizes every cell's gate bias with `TfForgetBias` (for training to export)."""
        for cell in self.forward_layers + self.backward_layers:
            cell.store_bias_as_in_file()

    def set_precision(self, precision: str) -> None:
        """Every cell's products in `precision`, for inference (`LstmCellWithProjection`)."""
        for cell in self.forward_layers + self.backward_layers:
            cell.set_precision(precision)

    def forward(
        self,
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
        backward_inputs: Optional[torch.Tensor] = None,
        backward_mask: Optional[torch.BoolTensor] = None,
    ) -> Tuple[torch.Tensor, LstmState]:
        """
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
        if self._directions_in_parallel(inputs, backward_inputs):
            forward, backward = self._run_directions_in_parallel(
                (self.forward_layers, inputs, mask, forward_start),
                (self.backward_layers, backward_inputs, backward_mask, backward_start),
            )
        else:
            forward = self._run_direction(self.forward_layers, inputs, mask, forward_start)
            backward = self._run_direction(
                self.backward_layers, backward_inputs, backward_mask, backward_start
            )
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
        records_graph = torch.is_grad_enabled() and (
            inputs.requires_grad
            or backward_inputs.requires_grad
            or any(parameter.requires_grad for parameter in self.parameters())
        )
        draws_random_numbers = self.training and (
            self._input_dropout.p > 0.0
            or any(cell.recurrent_dropout_probability > 0.0 for cell in self.forward_layers)
        )
        return (
            self.parallel_directions
            and inputs.device.type == "cpu"
            and torch.get_num_threads() >= 2
            and not records_graph
            and not draws_random_numbers
            and not torch.is_autocast_enabled("cpu")
        )

    def _run_directions_in_parallel(
        self, forward_arguments: Tuple, backward_arguments: Tuple
    ) -> Tuple[DirectionResult, DirectionResult]:
        threads = torch.get_num_threads()
        threads_per_direction = threads // 2
        inference_mode = torch.is_inference_mode_enabled()

        def backward_direction() -> DirectionResult:
            # Thread counts and inference mode are per thread: the worker takes the caller's.
            torch.set_num_threads(threads_per_direction)
            with torch.inference_mode(inference_mode), torch.no_grad():
                return self._run_direction(*backward_arguments)

        torch.set_num_threads(threads_per_direction)
        backward_result = _backward_direction_executor().submit(backward_direction)
        try:
            forward_result = self._run_direction(*forward_arguments)
        finally:
            wait([backward_result])
            torch.set_num_threads(threads)
        return forward_result, backward_result.result()
