"""A sentence read in segments gives what reading it whole gives, and its final state."""
import pytest
import torch

from elmo_plugin import ElmoBiLm, batch_to_ids
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

TOKENS = [f"w{i % 37}" for i in range(103)] + ["über", "x" * 70]


@pytest.fixture(scope="module")
def bilm():
    return ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False).double().eval()


def read_whole(bilm, initial_state):
    with torch.no_grad():
        output, final_state = bilm.forward_with_state(batch_to_ids([TOKENS]), initial_state)
    return torch.stack([layer[0, 1:-1] for layer in output["activations"]]), final_state


@pytest.mark.parametrize("segment_tokens", [1, 2, 7, 50, len(TOKENS) + 1, len(TOKENS) + 2, 10_000])
@pytest.mark.parametrize("start", ["fixed point", "carried"])
def test_segments_equal_the_whole_sentence_in_float64(bilm, segment_tokens, start):
    if start == "fixed point":
        initial_state = bilm.start_state()
    else:  # some other row's state, as a stateful batch carries it
        generator = torch.Generator().manual_seed(0)
        initial_state = tuple(torch.randn(tensor.shape, generator=generator, dtype=torch.float64) * 0.1
                              for tensor in bilm.start_state())
    expected, expected_final = read_whole(bilm, initial_state)
    layers = torch.full_like(expected, float("nan"))
    hidden = bilm.lstm.hidden_size
    calls = []

    def sink(direction, first, last, segment_layers):
        calls.append((direction, first, last))
        columns = slice(0, hidden) if direction == "forward" else slice(hidden, 2 * hidden)
        for index, layer in enumerate(segment_layers):
            layers[index, first:last, columns] = layer

    final = bilm.read_in_segments(TOKENS, initial_state, segment_tokens, sink)
    assert (layers - expected).abs().max() <= 1e-9
    for ours, theirs in zip(final, expected_final):
        assert (ours - theirs).abs().max() <= 1e-9
    # Every segment once per direction, backward in reverse order.
    forward = [(first, last) for direction, first, last in calls if direction == "forward"]
    backward = [(first, last) for direction, first, last in calls if direction == "backward"]
    assert backward == forward[::-1] and forward[0][0] == 0 and forward[-1][1] == len(TOKENS)
