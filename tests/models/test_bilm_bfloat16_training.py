"""Opt-in bfloat16 training (`training_precision`): what runs in bfloat16, what stays float32."""
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.kernels import onednn, recorded_products
from elmo_plugin.kernels.recorded_products import (
    BFLOAT16,
    FORWARD,
    INPUT_GRADIENT,
    WEIGHT_GRADIENT,
    product_nt,
)
from elmo_plugin.kernels.roles import Role
from elmo_plugin.modules import recorded_recurrence
from tests.helpers import BILM_SEED, BILM_TRAIN_TEXT, needs_bfloat16
from tests.models.test_bilm import tiny_model



def batch_of_windows(model):
    reader = BiLmCorpusReader(window_size=6, num_streams=3)
    batch = Batch(list(reader.read(BILM_TRAIN_TEXT))[:3])
    batch.index_instances(model.vocab)
    return batch.as_tensor_dict()


def test_unknown_or_unavailable_training_precisions_are_refused_by_key(monkeypatch):
    with pytest.raises(ConfigurationError, match="'training_precision' must be one of float32, bfloat16; got 'half'"):
        tiny_model(training_precision="half")
    monkeypatch.setattr(onednn, "available", lambda: False)
    with pytest.raises(ConfigurationError, match="'training_precision': 'bfloat16' needs a CPU with bfloat16"):
        tiny_model(training_precision="bfloat16")
    with pytest.raises(ConfigurationError, match="on a GPU use the trainer's 'use_amp'"):
        recorded_products.check_training_precision("bfloat16", torch.device("cuda"))


@needs_bfloat16
def test_bfloat16_products_read_rounded_operands_and_add_in_float32():
    generator = torch.Generator().manual_seed(0)
    a, b, bias = torch.randn(37, 300, generator=generator), torch.randn(20, 300, generator=generator), torch.randn(20)
    ours = product_nt(Role.HIGHWAY, FORWARD, a, b, bias, precision=BFLOAT16)
    rounded = torch.nn.functional.linear(a.bfloat16().double(), b.bfloat16().double(), bias.double())
    assert ours.dtype == torch.float32
    # The result is rounded to bfloat16 by oneDNN (8 bits), not the sum of 300 products.
    torch.testing.assert_close(ours.double(), rounded, rtol=8e-3, atol=1e-2)
    assert not torch.allclose(ours, torch.nn.functional.linear(a, b, bias), rtol=1e-5, atol=1e-5)


@needs_bfloat16
def test_a_bfloat16_step_is_close_to_float32s_and_keeps_float32_parameters_and_evaluation():
    losses, gradients, evaluations = {}, {}, {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(BILM_SEED)
        model = tiny_model(dropout=0.0, training_precision=precision)
        batch = batch_of_windows(model)
        numpy.random.seed(1)  # the same negative samples
        output = model(**batch)
        output["loss"].backward()
        losses[precision] = float(output["loss"].detach())
        gradients[precision] = {name: parameter.grad for name, parameter in model.named_parameters()}
        assert all(parameter.dtype == torch.float32 for parameter in model.parameters())
        assert all(gradient.dtype == torch.float32 for gradient in gradients[precision].values())
        model.eval()
        torch.manual_seed(BILM_SEED)
        with torch.no_grad():
            evaluations[precision] = float(model(**batch_of_windows(model))["loss"])
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=2e-2)
    assert losses["bfloat16"] != losses["float32"]  # the products did run in bfloat16
    for name, exact in gradients["float32"].items():
        ours = gradients["bfloat16"][name]
        assert (ours - exact).norm() <= 0.05 * exact.norm() + 1e-6, name
    assert evaluations["bfloat16"] == evaluations["float32"]  # evaluation stays float32


@needs_bfloat16
def test_the_backward_pass_uses_the_precision_of_its_forward_pass():
    layer = torch.nn.Linear(64, 32)
    inputs = torch.randn(10, 64, requires_grad=True)
    with recorded_products.bfloat16_products():
        outputs = recorded_products.trained_product(Role.HIGHWAY, layer.weight, layer.bias)(inputs)
    outputs.backward(torch.ones_like(outputs))  # after the block, as a trainer does
    exact = layer.weight.t().sum(dim=1).expand(10, 64)
    in_bfloat16 = layer.weight.bfloat16().double().t().sum(dim=1).expand(10, 64)
    torch.testing.assert_close(inputs.grad.double(), in_bfloat16, rtol=8e-3, atol=1e-2)
    assert not torch.allclose(inputs.grad, exact, rtol=1e-6, atol=1e-6)


@needs_bfloat16
def test_the_lstm_steps_read_their_weights_rounded_once_per_pass(monkeypatch):
    read = []

    def recording_product_nt(role, part, a, b, *args, **kwargs):
        if part != recorded_products.WEIGHT_GRADIENT:
            read.append((role, part, b.dtype))
        return product_nt(role, part, a, b, *args, **kwargs)

    monkeypatch.setattr(recorded_recurrence, "product_nt", recording_product_nt)
    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0, training_precision="bfloat16")
    model(**batch_of_windows(model))["loss"].backward()
    # Every step's products, forward and backward, read bfloat16 weights made before the steps,
    # not float32 weights rounded again at each step.
    parts = {(role, part) for role, part, _ in read}
    assert parts == {(role, part) for role in (Role.LSTM_RECURRENT, Role.LSTM_PROJECTION)
                     for part in (FORWARD, INPUT_GRADIENT)}
    assert {dtype for _, _, dtype in read} == {torch.bfloat16}


@needs_bfloat16
def test_a_gradient_that_several_products_read_is_rounded_once(monkeypatch):
    read = []

    def recording_product_nt(role, part, a, b, *args, **kwargs):
        read.append((role, part, a.dtype, a.untyped_storage().data_ptr()))
        return product_nt(role, part, a, b, *args, **kwargs)

    for module in (recorded_recurrence, recorded_products):  # the LSTM's steps, the other layers
        monkeypatch.setattr(module, "product_nt", recording_product_nt)
    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0, training_precision="bfloat16")
    model(**batch_of_windows(model))["loss"].backward()
    # Every weight gradient reads a bfloat16 gradient, the one (the same memory) that the
    # input gradient's products of that layer read: rounded once, not once per product.
    weight_gradients = [(role, dtype, memory) for role, part, dtype, memory in read if part == WEIGHT_GRADIENT]
    input_gradients = {(role, memory) for role, part, dtype, memory in read if part == INPUT_GRADIENT}
    assert {role for role, _, _ in weight_gradients} >= {
        Role.LSTM_INPUT, Role.LSTM_RECURRENT, Role.LSTM_PROJECTION, Role.HIGHWAY, Role.CHAR_PROJECTION
    }
    assert {dtype for _, dtype, _ in weight_gradients} == {torch.bfloat16}
    assert all((role, memory) in input_gradients for role, _, memory in weight_gradients)
