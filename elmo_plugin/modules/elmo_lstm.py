"""
ELMo's LSTM stack: separate forward and backward stacks of LSTM cells (`lstm_cell`), optional
residual connections between layers, the two directions side by side where that is faster.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy
import torch

from elmo_plugin.kernels import choice, threads
from elmo_plugin.kernels.products import Kernels
from elmo_plugin.modules.fixed_shape_lstm import FixedShapeLstm
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection
from elmo_plugin.modules.start_state import BatchStartState, LstmState
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, with_prefix

# One direction's outputs per layer, final states per layer, final memories per layer.
DirectionResult = Tuple[List[torch.Tensor], List[torch.Tensor], List[torch.Tensor]]

# Up to this many rows, which way of running the directions is faster depends on the CPU and the
# precision (how fast one thread runs a step's products), and is measured; above it a step's
# products dominate: the two ways were within 5% at 16 rows and side by side ahead at 64 in
# every precision (BENCHMARKS.md).
MOST_ROWS_MEASURED = 8
# The positions the two ways are timed on: a sentence as long as bilm-tf's training windows.
_TIMED_POSITIONS = 20
# Up to this many rows, CUDA graphs (`cuda_graphs`) ran a batch faster than launching its
# steps from Python; at 256 rows the step loop was ahead: the padded rows and the masks cost
# more than the launches they save (BENCHMARKS.md, "On a GPU"). Beyond it, the step loop also
# spares a long run of large batches (`allennlp elmo`) the graphs' memory.
CUDA_GRAPHS_MOST_ROWS = 64


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
    parallel_directions : `Optional[bool]`, optional (default = `None`)
        Where no autograd graph is recorded and nothing random happens, on the CPU: whether to
        run the backward direction in a second thread beside the forward one (see
        `elmo_plugin.kernels.threads`: it halves the process-wide torch thread count for the
        duration of the call, so turn this off if other threads run torch work at the same
        time). `None`: where it is faster on this machine (`directions_side_by_side`). Both
        ways compute the same values; one after the other each product runs on all threads,
        which can round differently in the last bits where a kernel splits its work by thread
        count (not seen with the published architecture's products: BENCHMARKS.md). Also an
        attribute, settable any time.
    kernels : `Kernels`, optional
        Computes the cells' products (`ElmoBiLm` shares its own).
    cuda_graphs : `bool`, optional (default = `True`)
        On a GPU, for batches of up to `CUDA_GRAPHS_MOST_ROWS` rows where no autograd graph is
        recorded and nothing random happens: run the directions in padded, fixed-shape chunks,
        each replayed as a CUDA graph (`fixed_shape_lstm`), instead of launching every step's
        kernels from Python. The same values up to the products' rounding; a little GPU memory
        per padded batch shape. In training, for batches without padding (packed windows):
        each cell's steps and their backward replayed as CUDA graphs (`captured_recurrence`).
        Also an attribute, settable any time.
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
        parallel_directions: Optional[bool] = None,
        kernels: Optional[Kernels] = None,
        cuda_graphs: bool = True,
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
        self.cuda_graphs = cuda_graphs
        self.fixed_shapes = FixedShapeLstm(
            (self.forward_layers, self.backward_layers), self.kernels, use_skip_connections
        )

    @property
    def cuda_graphs(self) -> bool:
        """Whether a GPU replays the steps as CUDA graphs: in inference up to
        `CUDA_GRAPHS_MOST_ROWS` rows (`fixed_shape_lstm`), in training for batches without
        padding (`LstmCellWithProjection.cuda_graphs`)."""
        return self._cuda_graphs

    @cuda_graphs.setter
    def cuda_graphs(self, enabled: bool) -> None:
        self._cuda_graphs = enabled
        for cell in self.forward_layers + self.backward_layers:
            cell.cuda_graphs = enabled

    def zero_state(self, batch_size: int, reference: torch.Tensor) -> LstmState:
        """An all-zero state of the shape `forward` takes, on `reference`'s device and dtype."""
        return (
            reference.new_zeros(self.num_layers, batch_size, 2 * self.hidden_size),
            reference.new_zeros(self.num_layers, batch_size, 2 * self.cell_size),
        )

    def reset_states(self) -> None:
        """Forgets the carried state (AllenNLP's method): the next batch starts from zeros."""
        self.batch_start_state.reset()

    @classmethod
    def from_options(
        cls, options: ElmoOptions, requires_grad: bool = False, kernels: Optional[Kernels] = None
    ) -> "ElmoLstm":
        """The stack an options file's `lstm` section describes (input and output: the
        projection size)."""
        return cls(
            input_size=options.projection_dim,
            hidden_size=options.projection_dim,
            cell_size=options.cell_dim,
            num_layers=options.n_layers,
            requires_grad=requires_grad,
            memory_cell_clip_value=options.cell_clip,
            state_projection_clip_value=options.proj_clip,
            use_skip_connections=options.use_skip_connections,
            kernels=kernels,
        )

    def set_input_dropout(self, probability: float) -> None:
        """Dropout on every layer's input in training mode (see `input_dropout_probability`)."""
        self._input_dropout.p = probability

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
        records_graph, draws_random_numbers = self._recorded_and_random(inputs, backward_inputs)
        if (
            self.cuda_graphs
            and inputs.is_cuda
            and inputs.size(0) <= CUDA_GRAPHS_MOST_ROWS
            and not records_graph
            and not draws_random_numbers
            and not torch.is_autocast_enabled("cuda")
        ):
            return self.fixed_shapes.run(inputs, mask, initial_state, backward_inputs, backward_mask, captured=True)
        side_by_side = self.directions_side_by_side(inputs.size(0), inputs, records_graph, draws_random_numbers)
        return self._run_directions(inputs, mask, initial_state, backward_inputs, backward_mask, side_by_side)

    def _run_directions(
        self,
        inputs: torch.Tensor,
        mask: torch.BoolTensor,
        initial_state: LstmState,
        backward_inputs: torch.Tensor,
        backward_mask: torch.BoolTensor,
        side_by_side: bool,
    ) -> Tuple[torch.Tensor, LstmState]:
        """`forward_with_state`, its directions side by side or one after the other."""
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

        if side_by_side:
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

    def _recorded_and_random(self, inputs: torch.Tensor, backward_inputs: torch.Tensor) -> Tuple[bool, bool]:
        """Whether autograd records a call on these inputs, and whether it draws dropout masks."""
        records_graph = torch.is_grad_enabled() and (
            inputs.requires_grad
            or backward_inputs.requires_grad
            or any(parameter.requires_grad for parameter in self.parameters())
        )
        draws_random_numbers = self.training and (
            self._input_dropout.p > 0.0
            or any(cell.recurrent_dropout_probability > 0.0 for cell in self.forward_layers)
        )
        return records_graph, draws_random_numbers

    def directions_side_by_side(
        self, rows: int, reference: torch.Tensor, records_graph: bool = False, draws_random_numbers: bool = False
    ) -> bool:
        """
        Whether a forward call over `rows` rows runs the two directions side by side (see
        `parallel_directions`): never where that could change a result (`threads`); with
        `parallel_directions=None`, for more than `MOST_ROWS_MEASURED` rows or with the fixed
        kernel table always, else by what was faster on this machine for this precision, dtype,
        shape, row class and thread count (`choice.fastest`, timed once per machine on
        `_TIMED_POSITIONS` random positions).

        # Parameters

        rows : `int`
            The batch's rows.
        reference : `torch.Tensor`
            A tensor of the call: its device and dtype.
        records_graph, draws_random_numbers : `bool`, optional (default = `False`)
            Whether autograd records the call, and whether it draws dropout masks.
        """
        if self.parallel_directions is False or not threads.can_run_side_by_side(
            reference.device, records_graph, draws_random_numbers
        ):
            return False
        if self.parallel_directions or choice.mode() == choice.FIXED or rows > MOST_ROWS_MEASURED:
            return True
        work_class = (
            f"lstm directions {self.kernels.precision} {str(reference.dtype).replace('torch.', '')} "
            f"{self.input_size}x{self.cell_size}x{self.hidden_size}x{self.num_layers} "
            f"rows<={choice.row_class(rows)} threads {torch.get_num_threads()}"
        )
        return choice.fastest(work_class, self._ways_to_run_directions(rows, reference)) == threads.SIDE_BY_SIDE

    def _ways_to_run_directions(self, rows: int, reference: torch.Tensor) -> Dict[str, Callable[[], Any]]:
        """Both directions over `rows` rows of `_TIMED_POSITIONS` random positions, side by side
        and one after the other (the inputs made at the first run, shared by both)."""
        work: List[Tuple[torch.Tensor, torch.BoolTensor, LstmState]] = []

        def run(side_by_side: bool) -> Tuple[torch.Tensor, LstmState]:
            if not work:
                generator = torch.Generator().manual_seed(0)
                inputs = torch.randn(rows, _TIMED_POSITIONS, self.input_size, generator=generator).to(reference)
                mask = torch.ones(rows, _TIMED_POSITIONS, dtype=torch.bool, device=reference.device)
                work.append((inputs, mask, self.zero_state(rows, inputs)))
            inputs, mask, state = work[0]
            return self._run_directions(inputs, mask, state, inputs, mask, side_by_side)

        return {threads.SIDE_BY_SIDE: lambda: run(True), threads.ONE_AFTER_THE_OTHER: lambda: run(False)}

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
