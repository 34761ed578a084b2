"""
oneDNN's float32 matrix product on the CPU, at a bounded set of row counts.

PyTorch computes a float32 `torch.nn.functional.linear` on the CPU with MKL's sgemm. For the
biLM's wide products with few rows (the LSTM's input and recurrent products, the highway
layers, the char CNN's filters) oneDNN's JIT-compiled kernels were faster on the machines we
measured (BENCHMARKS.md, "Embedding speed against AllenNLP"). Both add in float32, in
different orders; `Kernels` decides which products come here (not the narrow projections,
whose long sums oneDNN adds up less accurately).

oneDNN's product has no gradient in PyTorch, so it only serves products that autograd does
not record. Row counts are padded to a small set of sizes (`padded_rows`), since oneDNN keeps
memory for every input shape it has seen.
"""
import logging
from typing import Callable, Optional

import torch

logger = logging.getLogger(__name__)

Product = Callable[[torch.Tensor], torch.Tensor]


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


def available() -> bool:
    """Whether this PyTorch build has a working oneDNN linear operator."""
    return _ONEDNN_LINEAR is not None


def linear(inputs: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """`functional.linear(inputs, weight, bias)` by oneDNN, for 2-D float32 CPU operands of any
    strides, without a gradient (the caller pads the rows: `at_padded_rows`)."""
    # A broadcast operand (a zero stride: the gradient that `sum`, `mean` or `expand` pass
    # back) sends oneDNN to its reference kernel, about a thousand times slower as a weight
    # (BENCHMARKS.md); copied, it is an ordinary product.
    if 0 in weight.stride():
        weight = weight.contiguous()
    if 0 in inputs.stride():
        inputs = inputs.contiguous()
    return _ONEDNN_LINEAR(inputs, weight, bias, "none", [], "")


def padded_rows(rows: int) -> int:
    """
    The row count oneDNN computes a product of `rows` rows at: `rows` up to 8, then the next of
    four sizes per doubling (10, 12, 14, 16, 20, 24, 28, 32, 40, ...), at most 25% more rows.

    oneDNN keeps what it builds for each input shape for the life of the process (about a
    megabyte per shape for the biLM's products), and inference sees a new row count with nearly
    every batch (tokens per batch, rows still running at each LSTM step): unpadded, a long
    `allennlp elmo` run grew without bound (BENCHMARKS.md). Padded, each product sees a few
    dozen shapes at most.
    """
    if rows <= 8:
        return rows
    step = 1 << ((rows - 1).bit_length() - 3)
    return -(-rows // step) * step


def at_padded_rows(product: Product, inputs: torch.Tensor) -> torch.Tensor:
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


def onednn_product(weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Product:
    """
    `inputs -> functional.linear(inputs, weight, bias)` through oneDNN, for float32 CPU
    operands that autograd does not differentiate (the caller checks `weight` and `bias`; the
    inputs are checked per call, cheaply, since this runs at every LSTM step).
    """
    onednn_linear = _ONEDNN_LINEAR
    out_features = weight.size(0)

    def padded_onednn(rows: torch.Tensor) -> torch.Tensor:
        return onednn_linear(rows, weight, bias, "none", [], "")

    def product(inputs: torch.Tensor) -> torch.Tensor:
        if (
            inputs.dtype is not torch.float32
            or (inputs.requires_grad and torch.is_grad_enabled())
            or inputs.numel() == 0
        ):
            return torch.nn.functional.linear(inputs, weight, bias)
        flat = inputs.reshape(-1, inputs.size(-1))
        return at_padded_rows(padded_onednn, flat).view(*inputs.shape[:-1], out_features)

    return product


def bfloat16_weight_layout(weight: torch.Tensor) -> torch.Tensor:
    """
    A bfloat16 CPU `weight` `(out_features, in_features)` re-laid out by oneDNN for its
    products (an opaque `mkldnn` tensor that `linear` reads), or `weight` itself where this
    build cannot. A one-row product costs the reading of its weight, and oneDNN reads its own
    layout at the memory's speed, PyTorch's plain one more slowly (BENCHMARKS.md).
    """
    if not available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return weight
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, 1)
    except (AttributeError, RuntimeError):
        return weight
