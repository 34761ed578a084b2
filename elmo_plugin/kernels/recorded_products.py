"""
The float32 products of training (where autograd records a graph) on the CPU, each computed
by MKL (`functional.linear`, what PyTorch uses) or by oneDNN, chosen as inference's products
are (`choice`: measured on this CPU by default, the roles' fixed table otherwise).

PyTorch's oneDNN product has no derivative, so a trained linear layer here is an autograd
function whose three products are written out (`LinearWithGradients`): `y = x W^T + b`,
`dx = dy W` and `dW = dy^T x`. Each is a product `a b^T` (`product_nt`): oneDNN reads the
transposed operands through their strides, without copies. The LSTM's written-out backward
(`RecordedRecurrence`), the char CNN's training path (`ConvolveAndMaxPool`) and the sampled
softmax's loss (`models/sampled_softmax.py`) call `product_nt` directly. Why: on CPUs where MKL runs only its AVX2 code (AMD's), oneDNN's AVX512
kernels compute these shapes about twice as fast (BENCHMARKS.md).

A weight gradient of a tall, narrow weight (the LSTM's `(4 cell, projection)`, the sampled
softmax's `(samples, projection)`) is computed as its transpose, `(b a^T)^T`: oneDNN's kernels
run wide results at up to 3.6x the rate of tall narrow ones (BENCHMARKS.md). Where the kernel is
measured, that orientation is one more candidate; elsewhere its shape decides
(`_weight_gradient_is_tall_and_narrow`).

oneDNN keeps what it builds for every shape it sees, so its operands are padded to a bounded
set of sizes (`onednn.padded_rows`): the rows, and the inner size where it varies from step to
step (a weight gradient sums over the step's tokens). Zero rows and columns change no sum.

Opt-in bfloat16 training (`bfloat16_products`, on CPUs with bfloat16 instructions): every
product here reads bfloat16 copies of its operands and adds in float32 inside oneDNN; the
parameters, their gradients, the optimizer and everything between the products stay float32.
Its kernels are chosen as float32's, in classes of their own (`functional.linear` in bfloat16,
the `"mkl"` candidate, is oneDNN's matmul; it reads transposed operands without the copy that
oneDNN's linear makes). An operand that many products read (the LSTM's weights at every step)
is rounded once, by its caller (`product_operand`).
"""
import contextlib
from typing import Dict, Iterator, Optional

import torch
from allennlp.common.checks import ConfigurationError
from torch.autograd.function import once_differentiable

from elmo_plugin.kernels import choice, onednn
from elmo_plugin.kernels.onednn import Product, at_padded_rows, padded_rows
from elmo_plugin.kernels.roles import ONEDNN_ROLES, Role

FORWARD, INPUT_GRADIENT, WEIGHT_GRADIENT = "training forward", "input gradient", "weight gradient"
_MKL, _ONEDNN, _ONEDNN_TRANSPOSED = "mkl", "onednn", "onednn, result transposed"
# The inner size `_onednn_transposed` sums at once.
_SUMMED_AT_ONCE = 256
FLOAT32, BFLOAT16 = "float32", "bfloat16"
TRAINING_PRECISIONS = (FLOAT32, BFLOAT16)
# What a bfloat16 product takes: float32 tensors, or their `product_operand`s.
_BFLOAT16_INPUTS = (torch.float32, torch.bfloat16)
# The precision of the products from here on: set around a training forward pass, and saved
# with what a backward pass reads (which runs after the block has ended).
_precision = FLOAT32


def check_training_precision(precision: str, device: Optional[torch.device] = None) -> None:
    """A `ConfigurationError` for an unknown training precision, or bfloat16 where this CPU or
    torch has no bfloat16 products (or on a GPU, where autocast is the way)."""
    if precision not in TRAINING_PRECISIONS:
        raise ConfigurationError(
            f"elmo_bilm: 'training_precision' must be one of {', '.join(TRAINING_PRECISIONS)}; got {precision!r}."
        )
    if precision == BFLOAT16:
        if device is not None and device.type != "cpu":
            raise ConfigurationError(
                "elmo_bilm: 'training_precision': 'bfloat16' is for training on the CPU; on a GPU use the "
                "trainer's 'use_amp'."
            )
        if not (onednn.available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            raise ConfigurationError(
                "elmo_bilm: 'training_precision': 'bfloat16' needs a CPU with bfloat16 instructions "
                "(AVX512-BF16 or AMX) and oneDNN in torch; this machine has neither: use 'float32'."
            )


@contextlib.contextmanager
def bfloat16_products(enabled: bool = True) -> Iterator[None]:
    """Within the block (where `enabled`), the products here in bfloat16 (see the module)."""
    global _precision
    before = _precision
    _precision = BFLOAT16 if enabled else before
    try:
        yield
    finally:
        _precision = before


def current_precision() -> str:
    """The precision products get now (what a recording forward pass saves for its backward)."""
    return _precision


def operand_dtype(tensor: torch.Tensor, precision: Optional[str] = None) -> torch.dtype:
    """The dtype in which `product_nt` reads `tensor` in `precision` (by default the current
    one): bfloat16 for float32 CPU tensors in bfloat16 products, else the tensor's own."""
    if (precision or _precision) == BFLOAT16 and tensor.device.type == "cpu" and tensor.dtype is torch.float32:
        return torch.bfloat16
    return tensor.dtype


def product_operand(tensor: torch.Tensor, precision: Optional[str] = None) -> torch.Tensor:
    """
    `tensor` as `product_nt` reads it in `precision` (by default the current one): a bfloat16
    copy (in the same layout) for bfloat16 products of float32 CPU tensors, else `tensor`
    itself. For an operand that many products read, such as the LSTM's weights at every step:
    rounded once instead of at every product.
    """
    return tensor.to(operand_dtype(tensor, precision))


def _mkl(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.linear(a, b, bias)


def _onednn(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    inner = a.size(1)
    padding = padded_rows(inner) - inner
    if padding:
        a = torch.nn.functional.pad(a, (0, padding))
        b = torch.nn.functional.pad(b, (0, padding))
    return at_padded_rows(lambda rows: onednn.linear(rows, b, bias), a)


def _onednn_transposed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # A weight gradient (no bias): (a b^T) = (b a^T)^T, laid out as `a b^T` would be. oneDNN
    # adds up the inner size (a weight gradient's tokens) in one run; in parts of
    # `_SUMMED_AT_ONCE` the rounding stays within `choice`'s accuracy bound at 128 streams
    # (BENCHMARKS.md). The parts are added in float32 (a bfloat16 product's result is bfloat16).
    inner = a.size(1)
    transposed = _onednn(b[:, :_SUMMED_AT_ONCE], a[:, :_SUMMED_AT_ONCE], None).float()
    for start in range(_SUMMED_AT_ONCE, inner, _SUMMED_AT_ONCE):
        end = start + _SUMMED_AT_ONCE
        transposed.add_(_onednn(b[:, start:end], a[:, start:end], None))
    return transposed.t().contiguous()


def _weight_gradient_is_tall_and_narrow(part: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a b^T` is a weight gradient with 8 or more times as many rows as columns: where
    its transpose was the faster oneDNN product in float32 and in bfloat16 (BENCHMARKS.md; an
    input gradient of that shape gained nothing)."""
    return part == WEIGHT_GRADIENT and a.size(0) >= 8 * b.size(0)


def _kernel(role: Role, part: str, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> str:
    # Looked up at every call (the LSTM's steps), so by a key of its own, not `choice`'s name.
    # The inner size padded as oneDNN sees it: a weight gradient's varies with every step.
    key = (role, part, (b.size(0), padded_rows(b.size(1))), choice.row_class(a.size(0)), a.dtype)
    kernel = choice.call_site_decisions.get(key)
    if kernel is None:
        in_bfloat16 = a.dtype is torch.bfloat16
        if not onednn.available():
            kernel = _MKL
        elif choice.mode() == choice.FIXED:
            # bfloat16 products all went to oneDNN before they were measured; the table keeps that.
            if role not in ONEDNN_ROLES and not in_bfloat16:
                kernel = _MKL
            elif _weight_gradient_is_tall_and_narrow(part, a, b):
                kernel = _ONEDNN_TRANSPOSED
            else:
                kernel = _ONEDNN
        else:
            candidates: Dict[str, Product] = {
                _MKL: lambda rows: _mkl(rows, b, bias),
                _ONEDNN: lambda rows: _onednn(rows, b, bias),
            }
            if part == WEIGHT_GRADIENT:
                candidates[_ONEDNN_TRANSPOSED] = lambda rows: _onednn_transposed(rows, b)
            name = f"{role.value} {part}{' in bfloat16' if in_bfloat16 else ''}"
            kernel = choice.chosen((name, key[2], key[3]), candidates, a, b, bias)
        choice.call_site_decisions[key] = kernel
    return kernel


def _product(kernel: str, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if kernel == _ONEDNN:
        return _onednn(a, b, bias)
    if kernel == _ONEDNN_TRANSPOSED:
        return _onednn_transposed(a, b)
    return _mkl(a, b, bias)


def product_nt(
    role: Role,
    part: str,
    a: torch.Tensor,
    b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    precision: Optional[str] = None,
    float32_result: bool = True,
) -> torch.Tensor:
    """
    `a @ b^T (+ bias)` for 2-D operands of any strides, not recorded by autograd, with the
    kernel chosen for `role`'s `part` (`FORWARD`, `INPUT_GRADIENT`, `WEIGHT_GRADIENT`) at this
    shape class. Float32 CPU operands (and their bfloat16 products) only go to oneDNN; anything
    else is `functional.linear`.
    `precision`: `"bfloat16"` for bfloat16 operands (a float32 result); by default the current
    one (`bfloat16_products`). `a` and `b` may already be that precision's `product_operand`.
    `float32_result=False` (without a bias): a bfloat16 product's result as it comes, in
    bfloat16, for a caller that only compares its values (the char CNN's maxima).
    """
    if (precision or _precision) == BFLOAT16 and a.device.type == "cpu" and a.dtype in _BFLOAT16_INPUTS:
        # Chosen like float32's among the same kernels (which is fastest differs: BENCHMARKS.md).
        a, b = product_operand(a, BFLOAT16), product_operand(b, BFLOAT16)
        outputs = _product(_kernel(role, part, a, b, None), a, b, None)
        if bias is not None:
            # Converted to float32 inside the addition: one pass over the result.
            return torch.add(bias, outputs)
        return outputs.float() if float32_result else outputs
    if (
        a.device.type != "cpu"
        or a.dtype is not torch.float32
        or b.dtype is not torch.float32
        or a.numel() == 0
        or b.numel() == 0
    ):
        return _mkl(a, b, bias)
    return _product(_kernel(role, part, a, b, bias), a, b, bias)


class LinearWithGradients(torch.autograd.Function):
    """
    `functional.linear(inputs, weight, bias)` with its backward products written out, each
    through `product_nt`. `apply(inputs, weight, bias, role)`.
    """

    @staticmethod
    def forward(
        ctx, inputs: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], role: Role
    ) -> torch.Tensor:
        # (rows, in), as the forward and the weight gradient's products read them: in bfloat16,
        # rounded once and kept at half the size
        rows = product_operand(inputs.reshape(-1, inputs.size(-1)))
        ctx.save_for_backward(rows, weight)
        ctx.role, ctx.inputs_shape, ctx.has_bias = role, inputs.shape, bias is not None
        ctx.precision = _precision
        # (rows, out)
        outputs = product_nt(role, FORWARD, rows, weight, bias)
        return outputs.view(*inputs.shape[:-1], weight.size(0))

    @staticmethod
    @once_differentiable
    def backward(ctx, gradient: torch.Tensor):
        rows, weight = ctx.saved_tensors
        # (rows, out), as both products read it (in bfloat16, rounded once for the two)
        gradient = gradient.reshape(-1, gradient.size(-1))
        operand = product_operand(gradient, ctx.precision)
        inputs_gradient = weight_gradient = bias_gradient = None
        if ctx.needs_input_grad[0]:
            # (rows, out) x (out, in)
            inputs_gradient = product_nt(
                ctx.role, INPUT_GRADIENT, operand, weight.t(), precision=ctx.precision
            ).view(ctx.inputs_shape)
        if ctx.needs_input_grad[1]:
            # (out, rows) x (rows, in)
            weight_gradient = product_nt(ctx.role, WEIGHT_GRADIENT, operand.t(), rows.t(), precision=ctx.precision)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            bias_gradient = gradient.sum(dim=0)
        return inputs_gradient, weight_gradient, bias_gradient, None


def trained_product(role: Role, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Product:
    """`inputs -> functional.linear(inputs, weight, bias)` with gradients, its three products
    by `product_nt`: for float32 CPU layers that autograd records."""

    def product(inputs: torch.Tensor) -> torch.Tensor:
        return LinearWithGradients.apply(inputs, weight, bias, role)

    return product
