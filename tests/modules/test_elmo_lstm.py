import json
import multiprocessing

import pytest
import torch

from elmo_plugin.kernels import choice, threads
from elmo_plugin.models.trainable_bilm import TrainableBiLm
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.elmo_lstm import MOST_ROWS_MEASURED, ElmoLstm
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection
from elmo_plugin.weights.formats import read_bilm, read_bilm_weights
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


def test_tf_forget_bias_adds_one_to_the_forget_gate_in_float32_whatever_the_dtype():
    cell = LstmCellWithProjection(4, 3, 5)
    cell.state_linearity.bias.data.uniform_(-1e-3, 1e-3)
    folded = cell.state_linearity.bias.detach().clone()
    cell.store_bias_as_in_file()
    stored = cell.state_linearity.parametrizations.bias.original
    assert torch.equal(stored[:5], folded[:5]) and torch.equal(stored[10:], folded[10:])
    assert torch.allclose(stored[5:10], folded[5:10] - 1.0)
    cell.double()
    with torch.no_grad():
        stored.fill_(1e-10)  # 1.0 + 1e-10 is 1.0 in float32, not in float64
    effective = cell.state_linearity.bias
    assert effective.dtype == torch.float64
    assert torch.equal(effective[5:10], torch.ones(5, dtype=torch.float64))
    assert torch.equal(effective[:5], stored[:5].float().double())


def test_parametrized_biases_keep_requires_grad():
    frozen = ElmoLstm(4, 3, 5, num_layers=2, requires_grad=False)
    frozen.store_biases_as_in_file()
    assert not any(parameter.requires_grad for parameter in frozen.parameters())
    trainable = ElmoLstm(4, 3, 5, num_layers=2, requires_grad=True)
    trainable.store_biases_as_in_file()
    assert all(parameter.requires_grad for parameter in trainable.parameters())


def test_a_bilm_with_biases_as_in_the_file_loads_them_unchanged_and_computes_the_same():
    character_ids = torch.randint(1, 200, (2, 4, 50))
    plain = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    as_in_file = TrainableBiLm(*read_bilm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE))  # biases kept as in the file
    as_in_file.stateful = plain.stateful
    as_in_file.requires_grad_(False)  # as `plain`: the products of inference, not training's
    in_file = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).arrays
    exported = as_in_file.weight_arrays()
    assert all((exported[name] == array).all() for name, array in in_file.items())
    plain_layers = plain(character_ids)["activations"]
    for ours, theirs in zip(plain_layers, as_in_file(character_ids)["activations"]):
        assert torch.equal(ours, theirs)


def test_the_backward_cells_can_read_other_inputs():
    torch.manual_seed(0)
    lstm = ElmoLstm(4, 3, 5, num_layers=2).double()
    forward_text, backward_text = torch.randn(2, 6, 4).double(), torch.randn(2, 6, 4).double()
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    backward_mask = torch.tensor([[True] * 3 + [False] * 3, [True] * 6])
    state = lstm.zero_state(2, forward_text)
    mixed, (mixed_h, _) = lstm.forward_with_state(forward_text, mask, state, backward_text, backward_mask)
    forward_only, (forward_h, _) = lstm.forward_with_state(forward_text, mask, state)
    backward_only, (backward_h, _) = lstm.forward_with_state(backward_text, backward_mask, state)
    assert torch.equal(mixed[..., :3], forward_only[..., :3])
    assert torch.equal(mixed[..., 3:], backward_only[..., 3:])
    assert torch.equal(mixed_h[..., :3], forward_h[..., :3])
    assert torch.equal(mixed_h[..., 3:], backward_h[..., 3:])


def test_batch_one_inference_uses_mkl_packed_weights_that_follow_weight_changes():
    from elmo_plugin import ElmoBiLm, batch_to_ids
    from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    cell = bilm.lstm.forward_layers[0]
    mkl_packed = lambda: bilm.kernels._mkl_packed.get(cell.state_linearity)  # noqa: E731
    one_sentence = batch_to_ids([["The", "cat", "sat", "on", "the", "mat", "."]])
    plain = bilm(one_sentence)["activations"]  # gradients enabled: the plain product
    with torch.no_grad():
        packed = bilm(one_sentence)["activations"]
        assert mkl_packed() is not None
        first_key = mkl_packed()[0]
        for expected, actual in zip(plain, packed):
            torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
        cell.state_linearity.weight.mul_(0.5)  # e.g. new weights loaded in place
        changed = bilm(one_sentence)["activations"]
        assert mkl_packed()[0] != first_key
    with torch.enable_grad():
        expected_changed = bilm(one_sentence)["activations"]
    torch.testing.assert_close(changed[-1], expected_changed[-1].detach(), rtol=0, atol=1e-5)


@pytest.fixture
def two_threads():
    """Two torch threads for the test (the parallel directions need two), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def _lstm_and_inputs(requires_grad: bool = False):
    torch.manual_seed(0)
    lstm = ElmoLstm(6, 4, 7, num_layers=2, requires_grad=requires_grad).double()
    inputs = torch.randn(3, 5, 6, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4])
    state = (torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 14, dtype=torch.float64))
    return lstm, inputs, mask, state


def test_directions_in_parallel_threads_compute_what_the_serial_loop_does(monkeypatch, two_threads):
    lstm, inputs, mask, state = _lstm_and_inputs()
    calls = []
    run_side_by_side = threads.run_side_by_side
    monkeypatch.setattr(
        threads,
        "run_side_by_side",
        lambda *arguments: calls.append(1) or run_side_by_side(*arguments),
    )
    with torch.no_grad():
        parallel_outputs, (parallel_h, parallel_c) = lstm.forward_with_state(inputs, mask, state)
    with torch.inference_mode():
        inference_outputs, _ = lstm.forward_with_state(inputs, mask, state)
    assert calls == [1, 1] and torch.get_num_threads() == 2
    lstm.parallel_directions = False
    with torch.no_grad():
        serial_outputs, (serial_h, serial_c) = lstm.forward_with_state(inputs, mask, state)
    assert calls == [1, 1]
    for parallel, serial in (
        (parallel_outputs, serial_outputs),
        (inference_outputs, serial_outputs),
        (parallel_h, serial_h),
        (parallel_c, serial_c),
    ):
        assert torch.allclose(parallel, serial, atol=1e-12, rtol=0)
    assert parallel_outputs.abs().sum() > 0


def _in_parallel(lstm: ElmoLstm, inputs: torch.Tensor) -> bool:
    return lstm.directions_side_by_side(inputs.size(0), inputs, *lstm._recorded_and_random(inputs, inputs))


def test_directions_run_serially_where_threads_would_change_training(two_threads):
    lstm, inputs, mask, state = _lstm_and_inputs(requires_grad=True)
    assert not _in_parallel(lstm, inputs)  # trainable: a graph is recorded
    with torch.no_grad():
        assert _in_parallel(lstm, inputs)
    frozen, *_ = _lstm_and_inputs()
    assert _in_parallel(frozen, inputs)  # frozen biLM in a task model
    trainable_inputs = inputs.clone().requires_grad_()
    assert not _in_parallel(frozen, trainable_inputs)
    with_dropout = ElmoLstm(6, 4, 7, num_layers=2, input_dropout_probability=0.1).double()
    assert with_dropout.training and not _in_parallel(with_dropout, inputs)
    assert _in_parallel(with_dropout.eval(), inputs)
    torch.set_num_threads(1)
    assert not _in_parallel(frozen, inputs)


def test_at_few_rows_the_directions_run_the_way_measured_faster_here_with_the_same_results(
    measuring, monkeypatch, two_threads
):
    lstm, inputs, mask, _ = _lstm_and_inputs()  # 3 rows
    timed = []

    def one_after_the_other_wins(ways, turns):
        timed.append(sorted(ways))
        for run in ways.values():  # both ways run for real
            run()
        return {threads.SIDE_BY_SIDE: 2.0, threads.ONE_AFTER_THE_OTHER: 1.0}

    monkeypatch.setattr(choice, "timed_in_turns", one_after_the_other_wins)
    side_by_side_calls = []
    run_side_by_side = threads.run_side_by_side
    monkeypatch.setattr(
        threads, "run_side_by_side", lambda *arguments: side_by_side_calls.append(1) or run_side_by_side(*arguments)
    )
    with torch.no_grad():
        measured = lstm(inputs, mask)  # timed here, on inputs of its own
        measured_state = lstm._states
        lstm.reset_states()
        decided = lstm(inputs, mask)
    assert timed == [[threads.ONE_AFTER_THE_OTHER, threads.SIDE_BY_SIDE]]
    assert side_by_side_calls == [1]  # the timing's run only
    assert torch.equal(measured, decided)  # the timing left the carried state alone
    assert all(torch.equal(a, b) for a, b in zip(measured_state, lstm._states))
    lstm.parallel_directions = True
    lstm.reset_states()
    with torch.no_grad():
        forced = lstm(inputs, mask)
    assert side_by_side_calls == [1, 1]
    # Up to rounding: one after the other, each product runs on both threads (see ElmoLstm).
    torch.testing.assert_close(forced, decided, atol=1e-12, rtol=0)
    # Each row class, precision, dtype, shape and thread count is a decision of its own.
    lstm.parallel_directions = None
    assert not lstm.directions_side_by_side(1, inputs) and len(timed) == 2
    assert lstm.directions_side_by_side(MOST_ROWS_MEASURED + 1, inputs) and len(timed) == 2
    assert sorted(json.loads(measuring.read_text())[choice.cpu_identity()]) == [
        f"lstm directions float32 float64 6x7x4x2 rows<={rows} threads 2 from one after the other/side by side"
        for rows in (1, 8)
    ]
    # Settings that time nothing: an explicit choice, or the fixed kernel table.
    lstm.parallel_directions = False
    assert not lstm.directions_side_by_side(5, inputs.float())
    lstm.parallel_directions = None
    choice.set_mode(choice.FIXED)
    assert lstm.directions_side_by_side(5, inputs.float()) and len(timed) == 2


def test_an_error_in_the_backward_thread_reaches_the_caller_and_threads_are_restored(
    monkeypatch, two_threads
):
    lstm, inputs, mask, state = _lstm_and_inputs()

    def fail(*arguments):
        raise RuntimeError("backward cell failed")

    monkeypatch.setattr(lstm.backward_layers[1], "forward", fail)
    with torch.no_grad(), pytest.raises(RuntimeError, match="backward cell failed"):
        lstm.forward_with_state(inputs, mask, state)
    assert torch.get_num_threads() == 2


def test_a_forked_child_runs_the_directions_in_parallel_in_its_own_thread(two_threads):
    lstm, inputs, mask, state = _lstm_and_inputs()
    with torch.no_grad():
        expected, _ = lstm.forward_with_state(inputs, mask, state)  # the parent's worker thread now exists
    pool = multiprocessing.get_context("fork").Pool(1)
    try:
        # The child computes in a fresh worker thread; a hang here would time out.
        computed = pool.apply_async(_outputs_in_child, (lstm, inputs, mask, state)).get(60)
        # Closed and joined, not terminated (the `with` block's exit): a terminated worker
        # cannot remove the temporary directory where it shared its result's tensor
        # (multiprocessing's `pymp-*`, holding a socket), and left one in /tmp.
        pool.close()
        pool.join()
    finally:
        pool.terminate()
    assert torch.allclose(computed, expected, atol=1e-12, rtol=0)


def _outputs_in_child(lstm, inputs, mask, state):
    torch.set_num_threads(2)
    with torch.no_grad():
        return lstm.forward_with_state(inputs, mask, state)[0]


def test_allennlps_forward_masks_padding_and_keeps_the_state():
    # AllenNLP's `ElmoLstm(...)(inputs, mask)`: outputs only, zero past each row's end, and
    # the carried state of shapes (num_layers, batch, 2 * hidden) and (.., 2 * cell).
    torch.manual_seed(0)
    inputs = torch.rand(4, 5, 3)
    mask = torch.tensor([[True] * 5, [True] * 4 + [False], [True] * 2 + [False] * 3, [True] + [False] * 4])
    inputs[~mask] = 0.0
    lstm = ElmoLstm(num_layers=2, input_size=3, hidden_size=5, cell_size=7,
                    memory_cell_clip_value=2, state_projection_clip_value=1)
    outputs = lstm(inputs, mask)
    assert outputs.shape == (2, 4, 5, 10)
    assert (outputs[:, ~mask] == 0).all() and (outputs[:, mask] != 0).any()
    assert [list(part.shape) for part in lstm._states] == [[2, 4, 10], [2, 4, 14]]


def _autograd_through_the_steps(cell, active_rows_at, dropout_mask, projected_inputs, state, memory,
                                state_weight, state_bias, projection_weight):
    """The reference for `RecordedRecurrence`: autograd records every operation of the steps."""
    return cell.recurrence(
        projected_inputs, state, memory, dropout_mask, active_rows_at,
        lambda rows: torch.nn.functional.linear(rows, state_weight, state_bias),
        lambda rows: torch.nn.functional.linear(rows, projection_weight),
    )


@pytest.mark.parametrize("go_forward", [True, False])
def test_the_recorded_recurrence_has_autograds_gradients(monkeypatch, go_forward):
    from elmo_plugin.modules import recorded_recurrence

    # Clipping that bites, recurrent dropout, rows of different lengths (one empty), an
    # initial state with gradients, and a loss on both the outputs and the final state.
    mask = torch.tensor([[True] * 5, [True] * 2 + [False] * 3, [False] * 5, [True] * 4 + [False]])
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(4, 5, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    initial = (torch.randn(4, 2, dtype=torch.float64, generator=generator, requires_grad=True),
               torch.randn(4, 6, dtype=torch.float64, generator=generator, requires_grad=True))
    weights = [torch.randn(shape, dtype=torch.float64, generator=generator) for shape in ((4, 5, 2), (4, 2), (4, 6))]
    gradients = {}
    for name in ("recorded", "autograd"):
        torch.manual_seed(1)
        cell = LstmCellWithProjection(3, 2, 6, go_forward, recurrent_dropout_probability=0.3,
                                      memory_cell_clip_value=0.8, state_projection_clip_value=0.5).double()
        with torch.no_grad():
            for parameter in cell.parameters():
                parameter.mul_(3.0)
        with monkeypatch.context() as patch:
            if name == "autograd":
                patch.setattr(recorded_recurrence.RecordedRecurrence, "apply", _autograd_through_the_steps)
            outputs, (state, memory) = cell(inputs, mask, initial)
        loss = sum((tensor * weight).sum() for tensor, weight in zip((outputs, state, memory), weights))
        tensors = [inputs, *initial, *cell.parameters()]
        gradients[name] = (outputs.detach(), torch.autograd.grad(loss, tensors))
    assert torch.equal(gradients["recorded"][0], gradients["autograd"][0])
    clipped = 0
    for ours, reference in zip(gradients["recorded"][1], gradients["autograd"][1]):
        assert torch.allclose(ours, reference, atol=1e-12, rtol=0)
        clipped += int((reference == 0).sum())
    assert gradients["recorded"][1][0][2].abs().sum() == 0  # the empty row's inputs
    assert clipped > 0  # the clip values were reached somewhere


def test_the_recorded_recurrence_passes_gradcheck():
    cell = LstmCellWithProjection(3, 2, 4, memory_cell_clip_value=3.0, state_projection_clip_value=3.0).double()
    mask = torch.tensor([[True] * 4, [True] * 3 + [False]])
    inputs = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    state = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)

    def run(inputs, state, memory):
        outputs, (final_state, final_memory) = cell(inputs, mask, (state, memory))
        return outputs, final_state, final_memory

    assert torch.autograd.gradcheck(run, (inputs, state, memory))
