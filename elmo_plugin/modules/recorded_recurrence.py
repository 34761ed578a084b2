"""
The backward pass of an LSTM cell's steps, written out (`RecordedRecurrence`): where gradients
are recorded (training), `LstmCellWithProjection.recurrence` runs without autograd, keeping what
the backward pass reads (`StepValues`), and the backward computes the gate gradients of all
steps into one tensor, then each weight's gradient as one product over all steps. Its products
are `recorded_products`' (MKL or oneDNN, as chosen for this CPU).
"""
from typing import List, NamedTuple, Optional, Tuple

import numpy
import torch
from torch.autograd.function import once_differentiable

from elmo_plugin.kernels.recorded_products import (
    FORWARD,
    INPUT_GRADIENT,
    WEIGHT_GRADIENT,
    current_precision,
    operand_dtype,
    product_nt,
    product_operand,
)
from elmo_plugin.kernels.roles import Role

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
    memory_within_clip: Optional[torch.Tensor]  # 1.0 where the clip passed c, else 0.0; None without clipping
    state_within_clip: Optional[torch.Tensor]  # the same for h


class RecordedSteps:
    """The steps' values, by position (the backward direction fills them from the end)."""

    def __init__(self, timesteps: int) -> None:
        self.steps: List[Optional[StepValues]] = [None] * timesteps


class _StepOperand:
    """
    A gradient that each step's product reads in part and its weight's gradient reads whole, as
    those products read it: the gradient itself, or in bfloat16 a copy that `rows` rounds step
    by step (each value once, instead of once per product).
    """

    def __init__(self, gradient: torch.Tensor, precision: str) -> None:
        self._gradient = gradient
        dtype = operand_dtype(gradient, precision)
        self.whole = gradient if dtype is gradient.dtype else torch.empty_like(gradient, dtype=dtype)

    def rows(self, step_rows: slice) -> torch.Tensor:
        """The step's rows, once the step has written them into the gradient."""
        rows = self.whole[step_rows]
        if self.whole is not self._gradient:
            rows.copy_(self._gradient[step_rows])
        return rows


def recorded_steps(
    cell: torch.nn.Module,
    active_rows_at: List[int],
    precision: str,
    projected_inputs: torch.Tensor,
    state: torch.Tensor,
    memory: torch.Tensor,
    state_weight: torch.Tensor,
    state_bias: torch.Tensor,
    projection_weight: torch.Tensor,
    dropout_mask: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, RecordedSteps]:
    """`RecordedRecurrence`'s forward: the outputs, final state and final memory of
    `cell.recurrence`, and what its backward reads (`step_gradients`)."""
    record = RecordedSteps(len(active_rows_at))
    # Every step reads the weights: in bfloat16, rounded once here.
    step_state_weight = product_operand(state_weight, precision)
    step_projection_weight = product_operand(projection_weight, precision)
    outputs, final_state, final_memory = cell.recurrence(
        projected_inputs,
        state,
        memory,
        dropout_mask,
        active_rows_at,
        lambda rows: product_nt(Role.LSTM_RECURRENT, FORWARD, rows, step_state_weight, state_bias, precision),
        lambda rows: product_nt(Role.LSTM_PROJECTION, FORWARD, rows, step_projection_weight, precision=precision),
        record,
    )
    return outputs, final_state, final_memory, record


def step_gradients(
    cell: torch.nn.Module,
    active_rows_at: List[int],
    precision: str,
    record: RecordedSteps,
    state_weight: torch.Tensor,
    projection_weight: torch.Tensor,
    dropout_mask: Optional[torch.Tensor],
    outputs_gradient: torch.Tensor,
    final_state_gradient: torch.Tensor,
    final_memory_gradient: torch.Tensor,
) -> Tuple[torch.Tensor, ...]:
    """
    `RecordedRecurrence`'s backward: from the gradients of the outputs `(batch, timesteps,
    hidden)`, final state and final memory, the gradients of the projected inputs, initial
    state, initial memory, state weight, state bias and projection weight.
    """
    steps, cell_size = record.steps, cell.cell_size
    # Every step reads the transposed weights: in bfloat16, rounded once here.
    step_state_weight = product_operand(state_weight.t(), precision)
    step_projection_weight = product_operand(projection_weight.t(), precision)
    # The gradients of h and c carried back through the steps (rows past a sentence's end
    # keep theirs: their state passes those steps unchanged).
    state_gradient = final_state_gradient.clone()
    memory_gradient = final_memory_gradient.clone()
    # (real tokens, 4 * cell) and (real tokens, hidden), time-major as `projected_inputs`
    gates_gradient = outputs_gradient.new_empty(sum(active_rows_at), 4 * cell_size)
    unclipped_state_gradient = outputs_gradient.new_empty(sum(active_rows_at), cell.hidden_size)
    # As the products read them (each step's in part, the weight's gradient whole)
    gates_operand = _StepOperand(gates_gradient, precision)
    unclipped_state_operand = _StepOperand(unclipped_state_gradient, precision)
    step_starts = numpy.cumsum([0] + active_rows_at[:-1]).tolist()
    timesteps = len(active_rows_at)
    for index in reversed(range(timesteps)) if cell.go_forward else range(timesteps):
        active_rows = active_rows_at[index]
        if active_rows == 0:
            continue
        step = steps[index]
        step_rows = slice(step_starts[index], step_starts[index] + active_rows)
        # (active_rows, hidden); the clips' masks are float32 (1.0 within the clip)
        d_state = torch.add(
            state_gradient[:active_rows],
            outputs_gradient[:active_rows, index],
            out=unclipped_state_gradient[step_rows],
        )
        if dropout_mask is not None:
            d_state.mul_(dropout_mask[:active_rows])
        if step.state_within_clip is not None:
            d_state.mul_(step.state_within_clip)
        # (active_rows, cell)
        d_output_memory = product_nt(
            Role.LSTM_PROJECTION,
            INPUT_GRADIENT,
            unclipped_state_operand.rows(step_rows),
            step_projection_weight,
            precision=precision,
        )
        input_gate, forget_gate, memory_init, output_gate = step.gates
        d_memory = memory_gradient[:active_rows] + _tanh_backward(d_output_memory * output_gate, step.squashed_memory)
        if step.memory_within_clip is not None:
            d_memory.mul_(step.memory_within_clip)
        # (active_rows, 4 * cell): the gradients before each gate's nonlinearity
        step_gates_gradient = gates_gradient[step_rows]
        d_input, d_forget, d_memory_init, d_output = step_gates_gradient.split(cell_size, dim=1)
        _sigmoid_backward_into(d_memory * memory_init, input_gate, grad_input=d_input)
        _sigmoid_backward_into(d_memory * step.previous_memory, forget_gate, grad_input=d_forget)
        _tanh_backward_into(d_memory * input_gate, memory_init, grad_input=d_memory_init)
        _sigmoid_backward_into(d_output_memory * step.squashed_memory, output_gate, grad_input=d_output)
        torch.mul(d_memory, forget_gate, out=memory_gradient[:active_rows])
        state_gradient[:active_rows] = product_nt(
            Role.LSTM_RECURRENT,
            INPUT_GRADIENT,
            gates_operand.rows(step_rows),
            step_state_weight,
            precision=precision,
        )
    # Each weight's gradient over all steps at once, in the time-major row order.
    recorded = [steps[index] for index in range(timesteps) if active_rows_at[index] > 0]
    previous_states = torch.cat([step.previous_state for step in recorded])
    output_memories = torch.cat([step.output_memory for step in recorded])
    return (
        gates_gradient,
        state_gradient,
        memory_gradient,
        product_nt(
            Role.LSTM_RECURRENT, WEIGHT_GRADIENT, gates_operand.whole.t(), previous_states.t(), precision=precision
        ),
        gates_gradient.sum(dim=0),
        product_nt(
            Role.LSTM_PROJECTION,
            WEIGHT_GRADIENT,
            unclipped_state_operand.whole.t(),
            output_memories.t(),
            precision=precision,
        ),
    )


class RecordedRecurrence(torch.autograd.Function):
    """
    `LstmCellWithProjection.recurrence` where gradients are recorded (training), with its
    backward pass written out. Autograd would record a dozen operations per step and, per
    step, multiply each weight's gradient by that step's few rows; here the steps' gate
    gradients land in one `(real tokens, 4 * cell)` tensor, which is the gradient of the
    projected inputs, and each weight's gradient is one product over all steps. On a GPU, where
    every row has a token at every step (packed training windows), both passes are replayed as
    CUDA graphs (`cell.captured_steps`, see `captured_recurrence`).

    `apply(cell, active_rows_at, dropout_mask, projected_inputs, state, memory, state_weight,
    state_bias, projection_weight)`, in the sorted row order of `recurrence`, returns its
    outputs, final state and final memory.
    """

    @staticmethod
    def forward(
        ctx,
        cell: torch.nn.Module,  # the `LstmCellWithProjection` whose steps these are
        active_rows_at: List[int],
        dropout_mask: Optional[torch.Tensor],
        projected_inputs: torch.Tensor,
        state: torch.Tensor,
        memory: torch.Tensor,
        state_weight: torch.Tensor,
        state_bias: torch.Tensor,
        projection_weight: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        precision = current_precision()
        tensors = {
            "projected_inputs": projected_inputs,
            "state": state,
            "memory": memory,
            "state_weight": state_weight,
            "state_bias": state_bias,
            "projection_weight": projection_weight,
            "dropout_mask": dropout_mask,
        }
        ctx.cell, ctx.active_rows_at, ctx.precision = cell, active_rows_at, precision
        captured = cell.captured_steps
        claim = captured.claim(cell.cuda_graphs, active_rows_at, precision, tensors)
        ctx.claim = claim
        if claim is not None:
            # The graph's results are overwritten by its next replay: the caller gets copies.
            outputs, final_state, final_memory, _ = captured.forward(
                claim, lambda **buffers: recorded_steps(cell, active_rows_at, precision, **buffers), tensors
            )
            return outputs.clone(), final_state.clone(), final_memory.clone()
        outputs, final_state, final_memory, ctx.record = recorded_steps(cell, active_rows_at, precision, **tensors)
        ctx.dropout_mask = dropout_mask
        ctx.save_for_backward(state_weight, projection_weight)
        # An output is never an input itself (no step had a row).
        return outputs, final_state.clone() if final_state is state else final_state, (
            final_memory.clone() if final_memory is memory else final_memory
        )

    @staticmethod
    @once_differentiable
    def backward(ctx, outputs_gradient: torch.Tensor, final_state_gradient: torch.Tensor, final_memory_gradient: torch.Tensor):
        cell, active_rows_at, precision = ctx.cell, ctx.active_rows_at, ctx.precision
        gradients = {
            "outputs_gradient": outputs_gradient,
            "final_state_gradient": final_state_gradient,
            "final_memory_gradient": final_memory_gradient,
        }
        if ctx.claim is not None:

            def run(forward_results, forward_buffers, **gradients):
                return step_gradients(
                    cell, active_rows_at, precision, forward_results[3], forward_buffers["state_weight"],
                    forward_buffers["projection_weight"], forward_buffers["dropout_mask"], **gradients
                )

            return (None, None, None, *cell.captured_steps.backward(ctx.claim, run, gradients))
        state_weight, projection_weight = ctx.saved_tensors
        return (
            None,
            None,
            None,
            *step_gradients(
                cell, active_rows_at, precision, ctx.record, state_weight, projection_weight, ctx.dropout_mask,
                **gradients
            ),
        )
