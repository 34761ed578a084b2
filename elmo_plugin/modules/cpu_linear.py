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
nothing; training, other devices and other dtypes keep `functional.linear`. Row counts are
padded to a small set of sizes (`padded_rows`), since oneDNN keeps memory for every input
shape it has seen.
"""
import logging
from typing import Callable, Optional

import torch

logger = logging.getLogger(__name__)


def _find_onednn_linear():
    # A PyTorch-internal operator (the one Inductor's CPU backend emits for linear layers), so
    # its signature could change between releases: looked up once and tried on a small
    # product; where a build lacks it or it misbehaves, everything uses `functional.linear`.
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        onednn_linear = torch.ops.mkldnn._linear_pointwise
        generator = torch.Generator().manual_seed(0)
        inputs, weight, bias = (
            torch.randn(*shape, generator=generator) for shape in ((3, 8), (5, 8), (5,))
        )
        with torch.no_grad():
            works = torch.allclose(
                onednn_linear(inputs, weight, bias, "none", [], ""),
                torch.nn.functional.linear(inputs, weight, bias),
                rtol=1e-5,
                atol=1e-5,
            )
    except (AttributeError, RuntimeError, TypeError):
        return None
    if not works:
        logger.warning("oneDNN's linear disagrees with functional.linear here; not using it.")
        return None
    return onednn_linear


_ONEDNN_LINEAR = _find_onednn_linear()


def padded_rows(rows: int) -> int:
    """
    The row count oneDNN computes a product of `rows` rows at: `rows` up to 8, then the next of
    four sizes per doubling (10, 12, 14, 16, 20, 24, 28, 32, 40, ...), at most 25% more rows.

    oneDNN keeps what it builds for each input shape for the life of the process, ~0.5-1.2 MB
    per shape here, and inference sees a new row count with nearly every batch (tokens per
    batch, rows still running at each LSTM step). Unpadded, embedding 50,000 sentences grew the
    process by 2 GB (BENCHMARKS.md); padded, each product sees a few dozen shapes at most.
    """
    if rows <= 8:
        return rows
    step = 1 << ((rows - 1).bit_length() - 3)
    return -(-rows // step) * step


def linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """
    `torch.nn.functional.linear(inputs, weight, bias)`, through oneDNN where it applies: on the
    CPU, in float32, with no operand that autograd would differentiate. The rows are padded
    with zeros to `padded_rows` for oneDNN and the padding's results dropped.

    # Parameters

    inputs : `torch.Tensor`
        `(..., in_features)`.
    weight : `torch.Tensor`
        `(out_features, in_features)`.
    bias : `torch.Tensor`, optional
        `(out_features,)`.
    """
    # Called at every LSTM step, also where it only falls back (a GPU's loop is bound by host
    # time): the cheapest tests first, and no per-call containers.
    if (
        _ONEDNN_LINEAR is None
        or inputs.device.type != "cpu"
        or inputs.dtype != torch.float32
        or weight.dtype != torch.float32
        or (bias is not None and bias.dtype != torch.float32)
        or (
            torch.is_grad_enabled()
            and (
                inputs.requires_grad
                or weight.requires_grad
                or (bias is not None and bias.requires_grad)
            )
        )
        or inputs.numel() == 0
    ):
        return torch.nn.functional.linear(inputs, weight, bias)
    flat = inputs.reshape(-1, inputs.size(-1))
    output = at_padded_rows(lambda padded: _ONEDNN_LINEAR(padded, weight, bias, "none", [], ""), flat)
    return output.view(*inputs.shape[:-1], weight.size(0))


def at_padded_rows(
    product: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor
) -> torch.Tensor:
    """
    `product(inputs)` for a row-wise `product` of 2-D `inputs`, computed on `inputs` padded with
    zero rows to `padded_rows` and cut back: for every product that runs in oneDNN on the CPU
    (also PyTorch's own bfloat16 products).
    """
    rows = inputs.size(0)
    padding = padded_rows(rows) - rows
    if padding == 0:
        return product(inputs)
    return product(torch.cat([inputs, inputs.new_zeros(padding, inputs.size(1))]))[:rows]
