"""The LSTM stack's start state: carried (AllenNLP's), the fixed point, zero; get and set."""
import torch

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


def lstm_and_batch():
    torch.manual_seed(0)
    lstm = ElmoLstm(6, 4, 7, num_layers=2).double()
    inputs = torch.randn(3, 5, 6, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4])
    return lstm, inputs, mask


def test_without_a_state_the_stack_carries_its_own_as_allennlps_does():
    lstm, inputs, mask = lstm_and_batch()
    first = lstm(inputs, mask)
    second = lstm(inputs, mask)
    assert not torch.allclose(first, second)  # started from the first batch's final state
    lstm.reset_states()
    assert torch.equal(lstm(inputs, mask), first)
    zero = lstm.zero_state(3, inputs)
    assert torch.equal(lstm.forward_with_state(inputs, mask, zero)[0], first)


def test_an_explicit_state_does_not_touch_the_carried_one():
    lstm, inputs, mask = lstm_and_batch()
    lstm(inputs, mask)
    carried = lstm.batch_start_state.get()
    lstm.forward_with_state(inputs, mask, lstm.zero_state(3, inputs))
    assert all(torch.equal(a, b) for a, b in zip(lstm.batch_start_state.get(), carried))


def test_the_carried_state_can_be_saved_and_restored():
    lstm, inputs, mask = lstm_and_batch()
    lstm(inputs, mask)
    saved = tuple(part.clone() for part in lstm._states)  # AllenNLP 0.9's attribute
    expected = lstm(inputs, mask)
    lstm._states = None
    assert lstm.batch_start_state.get() is None
    lstm.batch_start_state.set(saved)
    assert torch.equal(lstm(inputs, mask), expected)


def test_rows_beyond_a_smaller_batch_keep_their_state():
    lstm, inputs, mask = lstm_and_batch()
    lstm(inputs, mask)
    third_row = [part[:, 2].clone() for part in lstm.batch_start_state.get()]
    lstm(inputs[:2], mask[:2])
    assert all(torch.equal(part[:, 2], kept) for part, kept in zip(lstm.batch_start_state.get(), third_row))


def test_not_stateful_without_a_fixed_point_is_a_zero_start():
    lstm, inputs, mask = lstm_and_batch()
    lstm.batch_start_state.stateful = False
    first = lstm(inputs, mask)
    assert torch.equal(lstm(inputs, mask), first)
    assert torch.equal(first, lstm.forward_with_state(inputs, mask, lstm.zero_state(3, inputs))[0])


def test_the_bilm_switches_between_carried_and_fixed_point_states():
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    ids = batch_to_ids([["a", "b"]])
    deterministic = bilm(ids)["activations"][2]
    assert torch.equal(bilm(ids)["activations"][2], deterministic)
    bilm.stateful = True
    assert bilm.lstm.batch_start_state.stateful
    from_zeros = bilm(ids)["activations"][2]
    assert not torch.allclose(from_zeros, deterministic)
    assert not torch.allclose(bilm(ids)["activations"][2], from_zeros)  # carried now


def test_a_pinned_fixed_point_is_used_until_a_parameter_changes():
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    fixed_point = bilm.start_state()
    zeros = tuple(torch.zeros_like(part) for part in fixed_point)
    bilm.lstm.batch_start_state.fixed_point.pin(zeros)
    assert all(torch.equal(a, b) for a, b in zip(bilm.start_state(), zeros))
    with torch.no_grad():
        bilm.lstm.forward_layer_0.state_projection.weight.mul_(1.0)  # a new version
    assert all(torch.allclose(a, b) for a, b in zip(bilm.start_state(), fixed_point))
