"""
The biLM's wide float32 matrix products for inference on the CPU: oneDNN's instead of MKL's.

PyTorch computes a float32 `torch.nn.functional.linear` on the CPU with MKL's sgemm. For the
biLM's wide products with few rows (1-64 rows x 512 x 16,384 in the LSTM, 20-600 rows x
2,048 x 4,096 in the highway layers) oneDNN's JIT-compiled kernels run 1.5-2x faster on the
development machine's AMD EPYC, where MKL stays well below the AVX512 rate (BENCHMARKS.md).

Both compute in float32, adding in different orders. For the narrow projections (4,096 or
2,048 inputs to 512 or 128 outputs) oneDNN's sums are ~3-4x further from float64 than MKL's
(measured on the test architectures), and those products are too small to gain anything,
so the projections are left to `functional.linear`; with that, our float32 outputs are as
close to float64 as AllenNLP's (`tests/modules/oracle.py`).

oneDNN's product has no gradient in PyTorch, so it is only used where autograd records
nothing; training, other devices and other dtypes keep `functional.linear`.
"""
from typing import Optional

import torch


def _find_onednn_linear():
    # A PyTorch-internal operator (the one Inductor's CPU backend emits for linear layers):
    # looked up once, and where a build lacks it everything uses `functional.linear`.
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


_ONEDNN_LINEAR = _find_onednn_linear()


def linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """
    `torch.nn.functional.linear(inputs, weight, bias)`, through oneDNN where it applies: on the
    CPU, in float32, with no operand that autograd would differentiate.

    # Parameters

    inputs : `torch.Tensor`
        `(..., in_features)`.
    weight : `torch.Tensor`
        `(out_features, in_features)`.
    bias : `torch.Tensor`, optional
        `(out_features,)`.
    """
    operands = (inputs, weight) if bias is None else (inputs, weight, bias)
    if (
        _ONEDNN_LINEAR is not None
        and inputs.device.type == "cpu"
        and all(operand.dtype == torch.float32 for operand in operands)
        and not (torch.is_grad_enabled() and any(operand.requires_grad for operand in operands))
    ):
        return _ONEDNN_LINEAR(inputs, weight, bias, "none", [], "")
    return torch.nn.functional.linear(inputs, weight, bias)
