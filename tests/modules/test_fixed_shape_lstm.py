"""
The LSTM stack in padded, fixed-shape chunks (what a GPU replays as CUDA graphs) computes what
the stack's own loop does: checked here on the CPU in float64, without graphs;
`tests/test_cuda.py` checks the captured graphs against this.
"""
import copy as copy_module
import gc
import weakref

import pytest
import torch

from elmo_plugin.kernels import cuda_graphs
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.fixed_shape_lstm import CHUNK_LENGTHS, chunk_lengths, padded_rows


@pytest.mark.parametrize("timesteps", [1, 2, 3, 7, 15, 16, 17, 31, 40])
def test_chunks_cover_the_positions_with_the_fewest_chunks_of_the_lengths(timesteps):
    lengths = chunk_lengths(timesteps)
    assert sum(lengths) == timesteps and all(length in CHUNK_LENGTHS for length in lengths)
    assert lengths == sorted(lengths, reverse=True)
    rest = timesteps % CHUNK_LENGTHS[0]
    assert len(lengths) == timesteps // CHUNK_LENGTHS[0] + bin(rest).count("1")


def test_rows_are_padded_to_few_shapes_with_at_most_a_third_padding():
    assert [padded_rows(rows) for rows in (1, 2, 3, 5, 8, 9, 12, 13, 17, 25, 33, 49, 64, 65, 100)] == [
        1, 2, 4, 8, 8, 12, 12, 16, 24, 32, 48, 64, 64, 96, 128,
    ]
    for rows in range(9, 600):
        padded = padded_rows(rows)
        assert rows <= padded and (padded - rows) / padded < 1 / 3


def _stack(clip: bool, skip: bool) -> ElmoLstm:
    torch.manual_seed(3)
    lstm = ElmoLstm(
        6,
        5,
        9,
        num_layers=2,
        memory_cell_clip_value=0.8 if clip else None,
        state_projection_clip_value=0.3 if clip else None,
        use_skip_connections=skip,
    ).double()
    for parameter in lstm.parameters():
        parameter.data.normal_(0, 0.6)  # large enough that both clips bind
    return lstm


@pytest.mark.parametrize("clip, skip", [(True, True), (False, False)])
@pytest.mark.parametrize("lengths", [[1], [19, 3, 19, 0, 7], [33, 16, 1, 2, 5, 12, 9, 31, 4]])
def test_fixed_shape_chunks_compute_what_the_stack_loop_does(clip, skip, lengths):
    lstm = _stack(clip, skip)
    rows, timesteps = len(lengths), max(lengths)
    inputs = torch.randn(rows, timesteps, 6, dtype=torch.float64)
    mask = torch.arange(timesteps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    # The backward direction reads other text, as a biLM in training evaluates.
    backward_inputs = torch.randn(rows, timesteps, 6, dtype=torch.float64)
    backward_mask = mask.flip(0)
    state = (torch.randn(2, rows, 10, dtype=torch.float64), torch.randn(2, rows, 18, dtype=torch.float64))
    with torch.no_grad():
        expected, (expected_h, expected_c) = lstm.forward_with_state(
            inputs, mask, state, backward_inputs, backward_mask
        )
        actual, (actual_h, actual_c) = lstm.fixed_shapes.run(
            inputs, mask, state, backward_inputs, backward_mask, captured=False
        )
        # The padded buffers are reused by the next batch of the same padded shape.
        again, _ = lstm.fixed_shapes.run(inputs, mask, state, backward_inputs, backward_mask, captured=False)
    if clip:
        assert (expected.abs() == 0.3).any()
    assert actual.shape == expected.shape
    for want, got in ((expected, actual), (expected_h, actual_h), (expected_c, actual_c), (expected, again)):
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
    assert (actual[:, ~mask, :5] == 0).all() and (actual[:, ~backward_mask, 5:] == 0).all()


def test_buffers_made_in_inference_mode_serve_calls_outside_it_and_copies_start_without_them():
    lstm = _stack(clip=True, skip=True)
    inputs = torch.randn(3, 5, 6, dtype=torch.float64)
    mask = torch.ones(3, 5, dtype=torch.bool)
    state = lstm.zero_state(3, inputs)
    with torch.inference_mode():
        first, _ = lstm.fixed_shapes.run(inputs, mask, state, inputs, mask, captured=False)
    with torch.no_grad():
        second, _ = lstm.fixed_shapes.run(inputs, mask, state, inputs, mask, captured=False)
    assert torch.equal(first, second)
    copy = copy_module.deepcopy(lstm)
    assert not copy.fixed_shapes._buffers and copy.fixed_shapes.cells[0][0] is copy.forward_layer_0
    with torch.no_grad():
        assert torch.equal(copy.fixed_shapes.run(inputs, mask, state, inputs, mask, captured=False)[0], first)


class _ReplayedOnTheCpu:
    """Stands in for a captured CUDA graph: replaying runs the captured work again, into the
    results the capture returned (as a graph writes its static outputs)."""

    def __init__(self, work, results):
        self.work, self.results = work, results

    def replay(self):
        self.results.copy_(self.work())


def _capture_on_the_cpu(monkeypatch):
    captures = []

    def capture(cache, work, mutated):
        saved = [tensor.clone() for tensor in mutated]
        results = work()  # what a capture records; the buffers are put back as the cache does
        for tensor, value in zip(mutated, saved):
            tensor.copy_(value)
        captures.append(work)
        return _ReplayedOnTheCpu(work, results), results, work

    monkeypatch.setattr(cuda_graphs.GraphCache, "_capture", capture)
    return captures


def test_the_captured_path_replays_one_graph_per_shape_and_recaptures_after_new_weights(monkeypatch):
    captures = _capture_on_the_cpu(monkeypatch)
    lstm = _stack(clip=True, skip=True)
    shapes = [[3, 20, 7], [20, 19, 3], [35, 2, 2, 2, 2, 2, 2, 2, 2, 2]]
    for lengths in shapes + shapes[:1]:
        rows, timesteps = len(lengths), max(lengths)
        inputs = torch.randn(rows, timesteps, 6, dtype=torch.float64)
        mask = torch.arange(timesteps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        state = lstm.zero_state(rows, inputs)
        with torch.no_grad():
            expected, _ = lstm.forward_with_state(inputs, mask, state)
            actual, _ = lstm.fixed_shapes.run(inputs, mask, state, inputs, mask, captured=True)
        assert torch.allclose(actual, expected, atol=1e-12, rtol=0)
    # Per direction: 4 padded rows in chunks of 16 and 4 (both 20-position batches), 12 padded
    # rows in chunks of 16, 2 and 1 (35 positions); the repeated batch captures nothing new.
    assert len(lstm.fixed_shapes.graphs) == len(captures) == 2 * (2 + 3)
    with torch.no_grad():
        lstm.forward_layer_0.state_linearity.weight.mul_(0.9)
        actual, _ = lstm.fixed_shapes.run(inputs, mask, state, inputs, mask, captured=True)
        expected, _ = lstm.forward_with_state(inputs, mask, state)
    assert torch.allclose(actual, expected, atol=1e-12, rtol=0)
    # The old graphs dropped; the last batch's (4 rows, 16 + 4 positions) captured again.
    assert len(lstm.fixed_shapes.graphs) == 2 * 2


def test_a_graph_keeps_alive_the_precision_copies_it_reads(monkeypatch):
    # A graph replays the addresses it captured: the bfloat16 copies of the weights must outlive
    # `Kernels`' cache of them (emptied by `set_precision`, even to the same precision).
    captures = _capture_on_the_cpu(monkeypatch)
    lstm = _stack(clip=True, skip=True).float()
    lstm.kernels.set_precision("bfloat16")
    inputs = torch.randn(2, 5, 6)
    mask = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        lstm.fixed_shapes.run(inputs, mask, lstm.zero_state(2, inputs), inputs, mask, captured=True)
    copies = [weakref.ref(copy) for _, copy in lstm.kernels._reduced.values()]
    assert len(copies) == 2 * 2 * 3  # directions x layers x (input, recurrent, projection)
    lstm.kernels.set_precision("bfloat16")
    gc.collect()
    assert all(copy() is not None for copy in copies)
    lstm.fixed_shapes.graphs.clear()
    captures.clear()  # the stand-in's own record of the captured work
    gc.collect()
    assert all(copy() is None for copy in copies)
