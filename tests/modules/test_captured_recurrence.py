"""
The LSTM cell's training steps through `CapturedRecurrence`'s buffers and claims, run without
graphs (`capture=False`) so that the CPU checks them; `tests/test_cuda.py` replays the graphs.
"""
import pytest
import torch

from elmo_plugin.modules.captured_recurrence import CapturedRecurrence
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection

FULL = torch.ones(3, 5, dtype=torch.bool)


def make_cell(buffered: bool, go_forward: bool = True) -> LstmCellWithProjection:
    torch.manual_seed(1)
    cell = LstmCellWithProjection(3, 2, 6, go_forward, recurrent_dropout_probability=0.3,
                                  memory_cell_clip_value=0.8, state_projection_clip_value=0.5).double()
    with torch.no_grad():
        for parameter in cell.parameters():
            parameter.mul_(3.0)  # so that the clips bite
    cell.captured_steps = CapturedRecurrence(capture=False)
    cell.cuda_graphs = buffered
    return cell


def inputs_and_state(seed: int, rows: int = 3):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(rows, 5, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    state = (torch.randn(rows, 2, dtype=torch.float64, generator=generator, requires_grad=True),
             torch.randn(rows, 6, dtype=torch.float64, generator=generator, requires_grad=True))
    return inputs, state


def loss_of(outputs, state, memory, seed: int):
    generator = torch.Generator().manual_seed(100 + seed)
    return sum((tensor * torch.randn(tensor.shape, dtype=torch.float64, generator=generator)).sum()
               for tensor in (outputs, state, memory))


def gradients_of(cell, steps, mask=FULL):
    """Per step: the outputs and the gradients of the inputs, start state and parameters."""
    results = []
    for seed in range(steps):
        inputs, (state, memory) = inputs_and_state(seed, mask.size(0))
        torch.manual_seed(seed)  # the same dropout masks in both runs
        outputs, (final_state, final_memory) = cell(inputs, mask, (state, memory))
        tensors = [inputs, state, memory, *cell.parameters()]
        results.append((outputs.detach(), torch.autograd.grad(loss_of(outputs, final_state, final_memory, seed), tensors)))
    return results


def assert_same(actual, expected):
    for (outputs, gradients), (expected_outputs, expected_gradients) in zip(actual, expected):
        assert torch.equal(outputs, expected_outputs)
        for got, want in zip(gradients, expected_gradients):
            assert torch.equal(got, want)


@pytest.mark.parametrize("go_forward", [True, False])
def test_buffered_steps_give_the_recorded_recurrences_values(go_forward):
    buffered = make_cell(True, go_forward)
    assert_same(gradients_of(buffered, 3), gradients_of(make_cell(False, go_forward), 3))
    assert len(buffered.captured_steps) == 1  # one shape, its buffers reused by every step


def test_a_batch_with_padding_runs_its_steps_as_before():
    mask = FULL.clone()
    mask[1, 3:] = False
    buffered = make_cell(True)
    assert_same(gradients_of(buffered, 2, mask), gradients_of(make_cell(False), 2, mask))
    assert len(buffered.captured_steps) == 0


def test_a_second_forward_before_the_first_backward_runs_without_the_buffers():
    results = {}
    for buffered in (True, False):
        cell = make_cell(buffered)
        runs = []
        for seed in range(2):  # two forward passes, then both backward passes
            inputs, (state, memory) = inputs_and_state(seed)
            outputs, (final_state, final_memory) = cell(inputs, FULL, (state, memory))
            runs.append((loss_of(outputs, final_state, final_memory, seed), [inputs, state, memory]))
        results[buffered] = [torch.autograd.grad(loss, tensors) for loss, tensors in reversed(runs)]
    for got, want in zip(results[True], results[False]):
        for got_gradient, want_gradient in zip(got, want):
            assert torch.equal(got_gradient, want_gradient)


def test_a_second_backward_after_another_forward_is_refused():
    cell = make_cell(True)
    inputs, (state, memory) = inputs_and_state(0)
    outputs, (final_state, final_memory) = cell(inputs, FULL, (state, memory))
    loss = loss_of(outputs, final_state, final_memory, 0)
    loss.backward(retain_graph=True)
    cell(*inputs_and_state(1)[:1], FULL, inputs_and_state(1)[1])[0].sum().backward()
    with pytest.raises(RuntimeError, match="cuda_graphs = False"):
        loss.backward()


def test_the_stack_sets_its_cells_and_copies_start_without_buffers():
    import copy

    lstm = ElmoLstm(4, 3, 5, num_layers=2, requires_grad=True)
    lstm.cuda_graphs = False
    assert not any(cell.cuda_graphs for cell in lstm.forward_layers + lstm.backward_layers)
    lstm.cuda_graphs = True
    for cell in lstm.forward_layers:
        cell.captured_steps.capture = False
    lstm(torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)).sum().backward()
    assert len(lstm.forward_layers[0].captured_steps) == 1
    copied = copy.deepcopy(lstm)
    assert len(copied.forward_layers[0].captured_steps) == 0
    assert copied.forward_layers[0].captured_steps.capture is False


def test_only_the_first_shapes_of_a_cell_are_buffered():
    from elmo_plugin.modules.captured_recurrence import MOST_CAPTURED_SHAPES

    buffered, stepped = make_cell(True), make_cell(False)
    for rows in range(1, MOST_CAPTURED_SHAPES + 3):
        mask = torch.ones(rows, 5, dtype=torch.bool)
        assert_same(gradients_of(buffered, 1, mask), gradients_of(stepped, 1, mask))
    assert len(buffered.captured_steps) == MOST_CAPTURED_SHAPES
