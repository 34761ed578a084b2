"""oneDNN's float32 products (inference and training): where they are used, and that they are `linear`."""
import types

import pytest
import torch

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.kernels import onednn
from elmo_plugin.kernels.products import Kernels, Role
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

needs_onednn = pytest.mark.skipif(
    onednn._ONEDNN_LINEAR is None, reason="this PyTorch build has no oneDNN linear"
)


def linear(inputs, weight, bias):
    """The product `Kernels` gives a wide (oneDNN-eligible) layer with these operands."""
    layer = types.SimpleNamespace(weight=weight, bias=bias)
    return Kernels().product(Role.HIGHWAY, layer)(inputs)


@pytest.fixture
def onednn_calls(monkeypatch):
    """The (input, weight) shapes of the products that go through oneDNN."""
    calls = []
    onednn_linear = onednn._ONEDNN_LINEAR

    def counting(inputs, weight, *arguments):
        calls.append((tuple(inputs.shape), tuple(weight.shape)))
        return onednn_linear(inputs, weight, *arguments)

    monkeypatch.setattr(onednn, "_ONEDNN_LINEAR", counting)
    return calls


def operands(*shape: int, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(*shape, 64, generator=generator, dtype=dtype)
    weight = torch.randn(96, 64, generator=generator, dtype=dtype)
    bias = torch.randn(96, generator=generator, dtype=dtype)
    return inputs, weight, bias


@needs_onednn
@pytest.mark.parametrize("shape", [(5,), (1,), (9,), (64,), (65,), (3, 7)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_onednn_product_equals_linear_in_float32(onednn_calls, shape, with_bias):
    inputs, weight, bias = operands(*shape)
    bias = bias if with_bias else None
    with torch.no_grad():
        ours = linear(inputs, weight, bias)
    rows = inputs.numel() // 64
    assert onednn_calls == [((onednn.padded_rows(rows), 64), (96, 64))]
    expected = torch.nn.functional.linear(inputs.double(), weight.double(), None if bias is None else bias.double())
    assert ours.shape == expected.shape and ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)


def test_padded_row_counts_are_few_and_close():
    padded = [onednn.padded_rows(rows) for rows in range(1, 4097)]
    assert padded[:8] == list(range(1, 9))
    assert all(rows <= padded_rows <= 1.25 * rows for rows, padded_rows in enumerate(padded, start=1))
    assert padded == sorted(padded) and len(set(padded)) == 44
    assert onednn.padded_rows(0) == 0


@needs_onednn
def test_empty_inputs_keep_functional_linear(onednn_calls):
    inputs, weight, bias = operands(0)
    with torch.no_grad():
        assert linear(inputs, weight, bias).shape == (0, 96)
    assert onednn_calls == []


@needs_onednn
def test_strided_operands(onednn_calls):
    inputs, weight, bias = operands(10)
    with torch.no_grad():
        ours = linear(inputs[::2], weight.t().contiguous().t(), bias)
    assert len(onednn_calls) == 1
    torch.testing.assert_close(ours, torch.nn.functional.linear(inputs[::2], weight, bias))


@needs_onednn
def test_broadcast_operands_reach_onednn_as_copies(monkeypatch):
    # The gradient of a `sum` is one value broadcast (all strides zero): oneDNN computed such a
    # weight operand by its reference kernel, about a thousand times slower.
    strides = []
    onednn_linear = onednn._ONEDNN_LINEAR

    def recording(inputs, weight, *arguments):
        strides.append((inputs.stride(), weight.stride()))
        return onednn_linear(inputs, weight, *arguments)

    monkeypatch.setattr(onednn, "_ONEDNN_LINEAR", recording)
    inputs, weight, _ = operands(16)
    broadcast = torch.ones(1).expand(16, 96)
    with torch.no_grad():
        as_weight = onednn.linear(inputs.t().contiguous(), broadcast.t(), None)
        as_inputs = onednn.linear(broadcast, weight.t(), None)
    assert strides and all(0 not in stride for pair in strides for stride in pair)
    torch.testing.assert_close(as_weight, inputs.t() @ broadcast)
    torch.testing.assert_close(as_inputs, broadcast @ weight)


@needs_onednn
def test_trained_products_run_forward_and_backward_in_onednn(onednn_calls):
    inputs, weight, bias = operands(3, 7)
    gradient = torch.randn(3, 7, 96, generator=torch.Generator().manual_seed(1))
    for parameter in (inputs, weight, bias):
        parameter.requires_grad_(True)
    linear(inputs, weight, bias).backward(gradient)
    # The product, the inputs' gradient and the weight's gradient (21 rows padded to 24).
    assert onednn_calls == [((24, 64), (96, 64)), ((24, 96), (64, 96)), ((96, 24), (64, 24))]
    exact = [tensor.detach().double().requires_grad_(True) for tensor in (inputs, weight, bias)]
    torch.nn.functional.linear(*exact).backward(gradient.double())
    for ours, expected in zip((inputs, weight, bias), exact):
        torch.testing.assert_close(ours.grad.double(), expected.grad, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_only_inputs_differentiated_or_float64_operands_keep_functional_linear(onednn_calls):
    inputs, weight, bias = operands(4)
    inputs.requires_grad_(True)
    linear(inputs, weight, bias).sum().backward()  # oneDNN's product would have no gradient
    assert inputs.grad is not None and onednn_calls == []
    inputs64, weight64, bias64 = operands(4, dtype=torch.float64)
    for parameter in (None, weight64):
        if parameter is not None:
            parameter.requires_grad_(True)
        assert torch.equal(
            linear(inputs64, weight64, bias64),
            torch.nn.functional.linear(inputs64, weight64, bias64),
        )
    assert onednn_calls == []


@needs_onednn
def test_bilm_inference_uses_onednn_for_wide_products_only(onednn_calls):
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    options = bilm.token_embedder.options
    with torch.no_grad():
        bilm(batch_to_ids([["a", "few", "words"], ["more"]]))
    products = {weight_shape for _, weight_shape in onednn_calls}
    cell, projection, n_filters = options.cell_dim, options.projection_dim, options.n_filters
    wide = {(4 * cell, projection), (2 * n_filters, n_filters)}  # LSTM input/recurrent, highway
    filters = {(number, width * options.char_embedding_dim) for width, number in options.filters}
    # Not the projections, (projection, cell) and (projection, n_filters): oneDNN adds up
    # their long sums less accurately (kernels.onednn).
    assert products == wide | filters


def test_a_missing_or_misbehaving_onednn_linear_is_not_used(monkeypatch, caplog):
    def wrong(inputs, weight, bias, *attributes):
        return torch.zeros(inputs.size(0), weight.size(0))

    def broken(*arguments):
        raise RuntimeError("unexpected arguments")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", wrong, raising=False)
    assert onednn._find_onednn_linear() is None
    assert "disagrees" in caplog.text
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", broken, raising=False)
    assert onednn._find_onednn_linear() is None
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert onednn._find_onednn_linear() is None
    # Without it, `linear` is `functional.linear`, bit for bit.
    monkeypatch.setattr(onednn, "_ONEDNN_LINEAR", None)
    inputs, weight, bias = operands(5)
    with torch.no_grad():
        assert torch.equal(linear(inputs, weight, bias), torch.nn.functional.linear(inputs, weight, bias))
