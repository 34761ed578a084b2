"""Opt-in bfloat16 / int8 inference: close to float32, never touching the float32 weights."""
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin import Elmo, ElmoBiLm, batch_to_ids
from elmo_plugin.kernels import onednn, recorded_products
from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.kernels.reduced_precision import PackedLinear
from tests.helpers import CARRIED_STATE_BATCHES, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

SENTENCES = [sentence for batch in CARRIED_STATE_BATCHES for sentence in batch if sentence]


def layers(bilm: ElmoBiLm):
    output = bilm(batch_to_ids(SENTENCES))
    mask = output["mask"]
    return [layer[mask] for layer in output["activations"]]


def mean_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())


@pytest.mark.parametrize("precision, minimum_cosine", [("bfloat16", 0.999), ("int8", 0.99)])
def test_reduced_precision_stays_close_to_float32(precision, minimum_cosine):
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    with torch.no_grad():
        reference = layers(bilm)
        bilm.set_precision(precision)
        reduced = layers(bilm)
        for expected, actual in zip(reference, reduced):
            assert not torch.equal(expected, actual)  # the packed products are really used
            assert mean_cosine(expected, actual) > minimum_cosine
        bilm.set_precision("float32")
        for expected, actual in zip(reference, layers(bilm)):
            assert torch.equal(expected, actual)


def test_weights_and_export_are_untouched_and_copies_follow_moves():
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    before = bilm.weight_arrays()
    bilm.set_precision("int8")
    after = bilm.weight_arrays()
    assert all(numpy.array_equal(before[name], after[name]) for name in before)
    elmo = Elmo(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, 1, dropout=0.0, precision="bfloat16")
    elmo.double()  # the bfloat16 copies are rebuilt; outputs follow the module's dtype
    with torch.no_grad():
        output = elmo(batch_to_ids(SENTENCES))["elmo_representations"][0]
    assert output.dtype == torch.float64 and torch.isfinite(output).all()


def test_bad_precisions_are_refused():
    with pytest.raises(ConfigurationError, match="must be one of float32, bfloat16, int8; got 'fp8'"):
        ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, precision="fp8")
    with pytest.raises(ConfigurationError, match="inference only"):
        ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, requires_grad=True, precision="int8")


@pytest.mark.parametrize("shape", [(1,), (9,), (65,), (3, 7)])
def test_bfloat16_product_at_padded_rows_is_cut_back(shape):
    # On the CPU the bfloat16 product runs on zero-padded rows (onednn.at_padded_rows).
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(40, 32, generator=generator), torch.randn(40, generator=generator)
    inputs = torch.randn(*shape, 32, generator=generator)
    product = PackedLinear(weight, bias, "bfloat16")
    expected = torch.nn.functional.linear(inputs.bfloat16(), weight.bfloat16()).float() + bias
    with torch.no_grad():
        actual = product(inputs)
    assert actual.shape == (*shape, 40) and actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(
    not (onednn.available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="oneDNN's bfloat16 products need a CPU with AVX512 (BF16 or emulated) in this build",
)
def test_bfloat16_weights_are_in_onednn_layout_and_give_the_plain_product():
    # The re-laid-out weight is what makes a one-row product read at the memory's speed.
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(300, 64, generator=generator)
    product = PackedLinear(weight, None, "bfloat16")
    assert product._weight.is_mkldnn
    for rows in (1, 5, 40):
        inputs = torch.randn(rows, 64, generator=generator)
        expected = torch.nn.functional.linear(inputs.bfloat16(), weight.bfloat16()).float()
        with torch.no_grad():
            actual = product(inputs)
        # Both round a float32 sum to bfloat16: at most one bfloat16 step apart.
        torch.testing.assert_close(actual, expected, rtol=2 ** -7, atol=1e-6)


def test_bfloat16_results_are_converted_inside_the_addition_or_kept():
    # Without a pass of their own over the result: the same values as `.float() + bias`.
    generator = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(48, 16, generator=generator), torch.randn(48, generator=generator)
    inputs = torch.randn(6, 16, generator=generator)
    plain = torch.nn.functional.linear(inputs.bfloat16(), weight.bfloat16())
    with torch.no_grad():
        with_bias = PackedLinear(weight, bias, "bfloat16")(inputs)
        kept = PackedLinear(weight, None, "bfloat16", keep_bfloat16=True)(inputs)
        converted = PackedLinear(weight, None, "bfloat16")(inputs)
    assert with_bias.dtype == converted.dtype == torch.float32 and kept.dtype == torch.bfloat16
    assert torch.equal(with_bias, PackedLinear(weight, None, "bfloat16")(inputs) + bias)
    assert torch.equal(kept.float(), converted)
    torch.testing.assert_close(converted, plain.float(), rtol=2 ** -7, atol=1e-6)
    # The LSTM's input products are the ones kept (only ever added to float32 gates).
    kernels = Kernels("bfloat16")
    lstm_input, highway = torch.nn.Linear(16, 48, bias=False), torch.nn.Linear(16, 48, bias=False)
    with torch.no_grad():
        assert kernels.product(Role.LSTM_INPUT, lstm_input)(inputs).dtype == torch.bfloat16
        assert kernels.product(Role.HIGHWAY, highway)(inputs).dtype == torch.float32


def test_the_cells_tanh_is_torchs_in_float32_and_approximated_in_reduced_precision_and_bfloat16_training():
    values = torch.linspace(-12.0, 12.0, 20001)
    assert torch.equal(Kernels().tanh(values), torch.tanh(values))
    with recorded_products.bfloat16_products():  # bfloat16 training
        in_bfloat16_training = Kernels().tanh(values)
    for approximate in [in_bfloat16_training] + [Kernels(precision).tanh(values) for precision in ("bfloat16", "int8")]:
        assert not torch.equal(approximate, torch.tanh(values))
        # Far below bfloat16's rounding (2^-8 relative), and bounded like tanh.
        torch.testing.assert_close(approximate, torch.tanh(values), rtol=0, atol=5e-7)
        assert approximate.abs().max() <= 1.0
