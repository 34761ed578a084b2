"""Which implementation `Kernels` gives each of the biLM's products, and when."""
import copy
import pickle

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.kernels import mkl_packed, onednn
from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.kernels.reduced_precision import PackedLinear


def kind(product) -> str:
    if isinstance(product, PackedLinear):
        return f"packed {product.precision}"
    return product.__qualname__.split(".")[0]


def layers():
    torch.manual_seed(0)
    return {
        Role.LSTM_INPUT: torch.nn.Linear(8, 32, bias=False),
        Role.LSTM_RECURRENT: torch.nn.Linear(8, 32),
        Role.LSTM_PROJECTION: torch.nn.Linear(16, 8, bias=False),
        Role.HIGHWAY: torch.nn.Linear(12, 24),
        Role.CHAR_PROJECTION: torch.nn.Linear(12, 8),
        Role.CHAR_CNN: torch.nn.Conv1d(4, 6, kernel_size=3),
    }


@pytest.mark.skipif(not (onednn.available() and mkl_packed.available()), reason="needs oneDNN and MKL")
def test_float32_inference_on_the_cpu():
    kernels = Kernels()
    with torch.no_grad():
        chosen = {role: kind(kernels.product(role, layer, rows=4)) for role, layer in layers().items()}
        one_row = kind(kernels.product(Role.LSTM_RECURRENT, layers()[Role.LSTM_RECURRENT], rows=1))
    assert chosen == {
        Role.LSTM_INPUT: "onednn_product",
        Role.LSTM_RECURRENT: "onednn_product",
        Role.HIGHWAY: "onednn_product",
        Role.CHAR_CNN: "onednn_product",
        Role.LSTM_PROJECTION: "_plain_product",  # oneDNN's long sums are less exact
        Role.CHAR_PROJECTION: "_plain_product",
    }
    assert one_row == "packed_product"


def test_training_has_written_out_gradients_and_float64_keeps_functional_linear():
    kernels = Kernels()
    trainable = layers()
    for role, layer in trainable.items():
        assert kind(kernels.product(role, layer, rows=1)) == "trained_product", role
    for role, layer in layers().items():
        with torch.no_grad():
            assert kind(kernels.product(role, layer.double(), rows=1)) == "_plain_product", role


def test_every_product_computes_the_layers_linear_map():
    kernels = Kernels()
    for role, layer in layers().items():
        weight = layer.weight.reshape(layer.weight.size(0), -1)
        inputs = torch.randn(5, weight.size(1))
        with torch.no_grad():
            for rows in (None, 1):
                actual = kernels.product(role, layer, rows=rows)(inputs[:1] if rows else inputs)
                expected = torch.nn.functional.linear(inputs[:1] if rows else inputs, weight, layer.bias)
                torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_reduced_precision_copies_are_made_once_and_follow_the_weights():
    kernels = Kernels()
    kernels.set_precision("bfloat16")
    all_layers = layers()
    with torch.no_grad():
        chosen = {role: kind(kernels.product(role, layer)) for role, layer in all_layers.items()}
        assert chosen.pop(Role.CHAR_CNN) == "onednn_product" or not onednn.available()
        assert set(chosen.values()) == {"packed bfloat16"}
        highway = all_layers[Role.HIGHWAY]
        first = kernels.product(Role.HIGHWAY, highway)
        assert kernels.product(Role.HIGHWAY, highway) is first
        highway.weight.mul_(2.0)
        assert kernels.product(Role.HIGHWAY, highway) is not first
    kernels.set_precision("float32")
    with torch.no_grad():
        assert kind(kernels.product(Role.HIGHWAY, highway)) != "packed bfloat16"


def test_precision_checks_and_a_temporary_precision():
    kernels = Kernels()
    with pytest.raises(ConfigurationError, match="inference only"):
        kernels.set_precision("int8", requires_grad=True)
    with pytest.raises(ConfigurationError, match="'int8' runs on the CPU only"):
        kernels.set_precision("int8", device=torch.device("cuda"))
    kernels.set_precision("int8", device=torch.device("cpu"))
    with kernels.precision_set_to("float32"):
        assert kernels.precision == "float32"
    assert kernels.precision == "int8"


def test_copies_keep_the_precision_and_drop_derived_weights():
    kernels = Kernels("bfloat16")
    layer = layers()[Role.HIGHWAY]
    with torch.no_grad():
        kernels.product(Role.HIGHWAY, layer)
    for copied in (copy.deepcopy(kernels), pickle.loads(pickle.dumps(kernels))):
        assert copied.precision == "bfloat16" and len(copied._reduced) == 0
