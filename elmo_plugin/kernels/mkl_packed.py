"""
MKL's packed single-row product: a weight re-laid out once by MKL for products with one row
(`torch.ops.mkl`, the packing PyTorch's own CPU inference compiler uses). For one sentence at
a time the LSTM's recurrent product has one row at every step, and reading a packed weight
is faster than MKL's or oneDNN's plain product (BENCHMARKS.md).
"""
from typing import Optional

import torch

from elmo_plugin.kernels.onednn import Product


def available() -> bool:
    """Whether this PyTorch build has MKL (and so its packed product)."""
    return torch.backends.mkl.is_available()


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` `(out_features, in_features)` laid out for single-row products."""
    return torch.ops.mkl._mkl_reorder_linear_weight(weight, 1)


def packed_product(packed: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Product:
    """`inputs (1, in_features) -> functional.linear(inputs, weight, bias)` from `pack(weight)`."""

    def product(inputs: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkl._mkl_linear(inputs, packed, weight, bias, 1)

    return product
