"""
Opt-in reduced-precision matrix products for inference: the biLM's LSTM, highway and
projection products in bfloat16 or int8 instead of float32.

At batch 1 the biLM is memory bound (every LSTM step reads all recurrent weights): int8
quarters the bytes (and computes faster on CPUs with VNNI), bfloat16 halves them. The float32
parameters stay as they are (export, state dicts and fine-tuning see no difference); each
layer gets a packed copy that `Kernels` makes once and uses instead. The char CNN's
convolutions stay in float32. Speed and fidelity are measured in BENCHMARKS.md; on a GPU
bfloat16 is faster than float32 from batches of 16 (the LSTM's steps replayed as CUDA graphs,
where the casts cost no launches) and slower at one sentence.
"""
from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.kernels import onednn

FLOAT32, BFLOAT16, INT8 = "float32", "bfloat16", "int8"
PRECISIONS = (FLOAT32, BFLOAT16, INT8)


def check_precision(precision: str, requires_grad: bool) -> None:
    """Raises a `ConfigurationError` for an unknown precision or one combined with training."""
    if precision not in PRECISIONS:
        raise ConfigurationError(
            f"ELMo precision must be one of {', '.join(PRECISIONS)}; got {precision!r}."
        )
    if precision != FLOAT32 and requires_grad:
        raise ConfigurationError(
            f"ELMo precision {precision!r} is for inference only; it cannot be combined with "
            "requires_grad (fine-tuning the biLM)."
        )


def approximate_tanh(inputs: torch.Tensor) -> torch.Tensor:
    """
    `tanh(x)` as `2 sigmoid(2x) - 1`, for reduced precision only: its error (about 2e-7) is far
    below bfloat16's rounding, but past what float32 results must match other implementations
    to (1e-6 after the two layers). PyTorch's CPU `tanh` costs several times its `sigmoid`, and
    the LSTM runs two per step (BENCHMARKS.md).
    """
    # In place after the first product: a second new tensor of this size made the call several
    # times slower at some sizes (fresh pages from the C allocator).
    doubled = inputs * 2
    return doubled.sigmoid_().mul_(2).sub_(1)


class PackedLinear:
    """
    An inference-only copy of `x W^T + b` in reduced precision; call it like `F.linear`.

    - `bfloat16`: W in bfloat16 (on the CPU in oneDNN's own layout, which its one-row products
      read at the memory's speed), the product in bfloat16 (float32 accumulation inside
      oneDNN), the result and the bias added in float32.
    - `int8`: W quantised per output row (symmetric, scale = max |row| / 127) and prepacked
      for FBGEMM; the input quantised per call (PyTorch's dynamic quantisation); CPU only.

    # Parameters

    weight : `torch.Tensor`
        `(out_features, in_features)`, as `torch.nn.Linear` holds it.
    bias : `torch.Tensor`, optional
        `(out_features,)`.
    precision : `str`
        `"bfloat16"` or `"int8"`.
    keep_bfloat16 : `bool`, optional (default = `False`)
        In bfloat16 without a bias, return the product's bfloat16 result as it is (for a caller
        that only adds it to float32 values, which converts it exactly on the way).
    """

    def __init__(
        self, weight: torch.Tensor, bias: Optional[torch.Tensor], precision: str, keep_bfloat16: bool = False
    ) -> None:
        weight = weight.detach().float()
        self.precision = precision
        self.keep_bfloat16 = keep_bfloat16
        self.out_features = weight.size(0)
        self._bias = None if bias is None else bias.detach().float().clone()
        if precision == BFLOAT16:
            self._weight = weight.to(torch.bfloat16)
            if weight.device.type == "cpu":
                self._weight = onednn.bfloat16_weight_layout(self._weight)
        elif precision == INT8:
            if weight.device.type != "cpu":
                raise ConfigurationError("ELMo precision 'int8' runs on the CPU only; use 'bfloat16' on a GPU.")
            scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
            quantized = torch.quantize_per_channel(
                weight, scales, torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8
            )
            self._packed = torch.ops.quantized.linear_prepack(quantized, self._bias)
        else:
            raise ValueError(f"No packed linear for precision {precision!r}")

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        leading = inputs.shape[:-1]
        flat = inputs.reshape(-1, inputs.size(-1))
        if self.precision == BFLOAT16:
            flat = flat.to(torch.bfloat16)
            if flat.device.type == "cpu":  # PyTorch runs it in oneDNN: see `at_padded_rows`
                output = onednn.at_padded_rows(self._bfloat16_product, flat)
            else:
                output = self._bfloat16_product(flat)
            # A pass over a wide result costs about what its product does at a step's few rows:
            # the conversion to float32 happens inside the addition that needs it (exactly the
            # values of `.float()` and `+ bias`), or inside the caller's (`keep_bfloat16`).
            if self._bias is not None:
                output = torch.add(self._bias, output)
            elif self.keep_bfloat16:
                return output.view(*leading, self.out_features)
        else:
            if flat.device.type != "cpu":
                raise ConfigurationError("ELMo precision 'int8' runs on the CPU only; use 'bfloat16' on a GPU.")
            output = torch.ops.quantized.linear_dynamic(flat.float().contiguous(), self._packed, True)
        return output.to(inputs.dtype).view(*leading, self.out_features)

    def _bfloat16_product(self, inputs: torch.Tensor) -> torch.Tensor:
        if self._weight.is_mkldnn:
            return onednn.linear(inputs, self._weight, None)
        return torch.nn.functional.linear(inputs, self._weight)
