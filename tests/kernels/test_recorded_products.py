"""
Training's products (`recorded_products`): oneDNN forward and backward where chosen,
with autograd's gradients, operands padded to few shapes, and the choice measured per part
and precision.
"""
import logging

import pytest
import torch

from elmo_plugin.kernels import choice, onednn, recorded_products
from elmo_plugin.kernels.recorded_products import FORWARD, WEIGHT_GRADIENT, product_nt
from elmo_plugin.kernels.roles import Role
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection
from tests.helpers import needs_bfloat16
from tests.kernels.test_choice import winning
from tests.kernels.test_onednn import onednn_calls  # noqa: F401 (a fixture)

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="this PyTorch build has no oneDNN linear")


@needs_onednn
def test_a_varying_summed_size_is_padded_and_the_product_unchanged(onednn_calls):
    generator = torch.Generator().manual_seed(0)
    for tokens in (41, 44, 47):  # a weight gradient sums over a step's tokens
        gradient, inputs = torch.randn(tokens, 24, generator=generator), torch.randn(tokens, 16, generator=generator)
        ours = product_nt(Role.HIGHWAY, WEIGHT_GRADIENT, gradient.t(), inputs.t())
        torch.testing.assert_close(ours.double(), gradient.double().t() @ inputs.double(), rtol=1e-5, atol=1e-5)
    # One shape for all three: 24 rows, the sums padded to 48 (oneDNN keeps memory per shape).
    assert onednn_calls == [((24, 48), (16, 48))] * 3


@needs_onednn
def test_the_fixed_table_keeps_projections_on_mkl(onednn_calls):
    inputs, weight = torch.randn(5, 8), torch.randn(4, 8)
    product_nt(Role.LSTM_PROJECTION, FORWARD, inputs, weight)
    product_nt(Role.CHAR_PROJECTION, FORWARD, inputs, weight)
    assert onednn_calls == []
    product_nt(Role.LSTM_RECURRENT, FORWARD, inputs, weight)
    assert len(onednn_calls) == 1


@needs_onednn
@pytest.mark.parametrize("winner", ["mkl", "onednn", "onednn, result transposed"])
def test_each_training_product_is_chosen_once_per_class_and_logged(measuring, monkeypatch, caplog, winner):  # noqa: F811
    timed = winning(monkeypatch, winner)
    layer = torch.nn.Linear(16, 64)
    inputs = torch.randn(20, 16, requires_grad=True)
    with caplog.at_level(logging.INFO, logger=choice.__name__):
        for _ in range(2):
            recorded_products.trained_product(Role.HIGHWAY, layer.weight, layer.bias)(inputs).sum().backward()
    # Forward and input gradient: two candidates each; the weight gradient three; once each.
    assert len(timed) == 7
    messages = sorted(r.getMessage().split(":")[0] for r in caplog.records if r.name == choice.__name__)
    assert messages == [
        "Kernel for highway input gradient 16x64 rows<=64 from mkl/onednn",
        "Kernel for highway training forward 64x16 rows<=64 from mkl/onednn",
        "Kernel for highway weight gradient 16x20 rows<=64 from mkl/onednn/onednn, result transposed",
    ]
    decided = [r.getMessage().split(": ")[1].split(", measured")[0] for r in caplog.records if r.name == choice.__name__]
    expected = {"mkl": ["mkl"] * 3, "onednn": ["onednn"] * 3, "onednn, result transposed": ["mkl", "mkl", winner]}
    assert sorted(decided) == sorted(expected[winner])  # a lone transposed candidate loses to MKL
    exact = inputs.detach().double()
    torch.testing.assert_close(layer.weight.grad.double(), 2 * torch.ones(64, 1).double() @ exact.sum(0, keepdim=True),
                               rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_tall_narrow_weight_gradient_is_computed_transposed_in_parts_of_the_tokens(onednn_calls):  # noqa: F811
    generator = torch.Generator().manual_seed(0)
    # 600 tokens: parts of 256, 256 and 88 (padded to 96); the (200, 16) result from (16, 200) ones.
    gradient, inputs = torch.randn(600, 200, generator=generator), torch.randn(600, 16, generator=generator)
    ours = product_nt(Role.LSTM_INPUT, WEIGHT_GRADIENT, gradient.t(), inputs.t())
    assert onednn_calls == [((16, 256), (200, 256))] * 2 + [((16, 96), (200, 96))]
    assert ours.shape == (200, 16) and ours.is_contiguous()
    # Sums of 600 terms of about 1: float32 rounding of 1e-5 at most.
    torch.testing.assert_close(ours.double(), gradient.double().t() @ inputs.double(), rtol=0, atol=5e-5)
    # A wide result, or another part of training, stays as it is.
    product_nt(Role.LSTM_INPUT, WEIGHT_GRADIENT, inputs.t(), gradient.t())
    product_nt(Role.LSTM_INPUT, FORWARD, gradient, torch.randn(16, 200, generator=generator))
    assert onednn_calls[3:] == [((16, 640), (200, 640)), ((640, 224), (16, 224))]  # rows and inner sizes padded


@needs_onednn
@needs_bfloat16
def test_in_bfloat16_a_tall_narrow_weight_gradient_is_computed_transposed_too(onednn_calls):  # noqa: F811
    generator = torch.Generator().manual_seed(0)
    gradient, inputs = torch.randn(300, 200, generator=generator), torch.randn(300, 16, generator=generator)
    ours = product_nt(Role.SAMPLED_SOFTMAX, WEIGHT_GRADIENT, gradient.t(), inputs.t(), precision="bfloat16")
    assert onednn_calls == [((16, 256), (200, 256)), ((16, 48), (200, 48))]
    assert ours.dtype is torch.float32 and ours.shape == (200, 16) and ours.is_contiguous()
    # As accurate as the product in one piece: the parts are added in float32, not bfloat16.
    exact = gradient.double().t() @ inputs.double()
    in_one_piece = product_nt(Role.SAMPLED_SOFTMAX, FORWARD, gradient.t(), inputs.t(), precision="bfloat16")
    error, error_in_one_piece = ((values.double() - exact).abs().max() for values in (ours, in_one_piece))
    assert error <= 1.25 * error_in_one_piece


@needs_onednn
@pytest.mark.parametrize("go_forward", [True, False])
def test_float32_lstm_training_through_onednn_has_float64s_gradients(onednn_calls, go_forward):
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] * 5 + [False]])
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(3, 6, 8, generator=generator)
    gradients = {}
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(1)
        cell = LstmCellWithProjection(8, 4, 16, go_forward, memory_cell_clip_value=2.0,
                                      state_projection_clip_value=2.0).to(dtype)
        state = (torch.zeros(3, 4, dtype=dtype), torch.zeros(3, 16, dtype=dtype))
        cell_inputs = inputs.to(dtype).detach().requires_grad_(True)
        outputs, _ = cell(cell_inputs, mask, state)
        outputs.pow(2).sum().backward()
        gradients[dtype] = [cell_inputs.grad] + [parameter.grad for parameter in cell.parameters()]
    assert len(onednn_calls) > 0  # the recurrent and input products of float32 training
    for ours, exact in zip(gradients[torch.float32], gradients[torch.float64]):
        torch.testing.assert_close(ours.double(), exact, rtol=1e-4, atol=1e-5)


@needs_bfloat16
@pytest.mark.parametrize("winner", ["mkl", "onednn", "onednn, result transposed"])
def test_in_bfloat16_each_product_is_chosen_apart_from_float32s(measuring, monkeypatch, caplog, winner):  # noqa: F811
    winning(monkeypatch, winner)
    layer = torch.nn.Linear(16, 64)
    inputs = torch.randn(20, 16, requires_grad=True)
    with caplog.at_level(logging.INFO, logger=choice.__name__):
        with recorded_products.bfloat16_products():
            outputs = recorded_products.trained_product(Role.HIGHWAY, layer.weight, layer.bias)(inputs)
        outputs.sum().backward()  # after the block, in its forward pass's precision
    messages = sorted(r.getMessage().split(":")[0] for r in caplog.records if r.name == choice.__name__)
    assert messages == [
        "Kernel for highway input gradient in bfloat16 16x64 rows<=64 from mkl/onednn",
        "Kernel for highway training forward in bfloat16 64x16 rows<=64 from mkl/onednn",
        "Kernel for highway weight gradient in bfloat16 16x20 rows<=64 from mkl/onednn/onednn, result transposed",
    ]
    assert outputs.dtype is torch.float32 and layer.weight.grad.dtype is torch.float32
    exact = torch.nn.functional.linear(inputs.detach().double(), layer.weight.detach().double(), layer.bias.double())
    torch.testing.assert_close(outputs.detach().double(), exact, rtol=2e-2, atol=2e-2)
    # Float32's own decisions are still to be made: a class of its own.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=choice.__name__):
        recorded_products.trained_product(Role.HIGHWAY, layer.weight, layer.bias)(inputs)
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.name == choice.__name__] == [
        "Kernel for highway training forward 64x16 rows<=64 from mkl/onednn"
    ]
