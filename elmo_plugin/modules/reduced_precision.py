"""
Opt-in reduced-precision matrix products for inference: the biLM's LSTM and highway/projection
layers in bfloat16 or int8 instead of float32.

At batch 1 the biLM is memory bound (every LSTM step reads all recurrent weights); int8
quarters the bytes and on CPUs with VNNI also computes faster (3.5-4.3x our float32 at batch 1,
2.0-3.0x at batches of 16-64 on the development machine). bfloat16 halves the bytes and gains
1.4-1.6x from batches of 16 up on a CPU with AVX512-BF16, but little at batch 1 (1.0-1.1x),
where float32 uses MKL's packed single-row product and bfloat16 does not. The float32
parameters stay as they are (export, state dicts and fine-tuning see no difference); each
layer gets a packed copy, made once, that `forward` uses instead. The char CNN's convolutions
stay in float32. Fidelity is measured in BENCHMARKS.md.

On a GPU, bfloat16 runs but is slower than float32 (0.6-0.9x on an H100, BENCHMARKS.md): the
per-step products are too small for halved bytes to matter there, and the casts add kernels
to a loop whose time is the host launching them.
"""
from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.modules.cpu_linear import at_padded_rows

FLOAT32, BFLOAT16, INT8 = "float32", "bfloat16", "int8"
PRECISIONS = (FLOAT32, BFLOAT16, INT8)


def check_precision(precision: str, requires_grad: bool) -> None:
    if precision not in PRECISIONS:
        raise ConfigurationError(
            f"ELMo precision must be one of {', '.join(PRECISIONS)}; got {precision!r}."
        )
    if precision != FLOAT32 and requires_grad:
        raise ConfigurationError(
            f"ELMo precision {precision!r} is for inference only; it cannot be combined with "
            "requires_grad (fine-tuning the biLM)."
        )


class PackedLinear:
    """
    An inference-only copy of `x W^T + b` in reduced precision; call it like `F.linear`.

    - `bfloat16`: W in bfloat16, the product in bfloat16 (float32 accumulation inside oneDNN),
      the result and the bias added in float32.
    - `int8`: W quantised per output row (symmetric, scale = max |row| / 127) and prepacked
      for FBGEMM; the input quantised per call (PyTorch's dynamic quantisation); CPU only.

    # Parameters

    weight : `torch.Tensor`
        `(out_features, in_features)`, as `torch.nn.Linear` holds it.
    bias : `torch.Tensor`, optional
        `(out_features,)`.
    precision : `str`
        `"bfloat16"` or `"int8"`.
    """

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], precision: str) -> None:
        weight = weight.detach().float()
        self.precision = precision
        self.out_features = weight.size(0)
        self._bias = None if bias is None else bias.detach().float().clone()
        if precision == BFLOAT16:
            self._weight = weight.to(torch.bfloat16)
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
                output = at_padded_rows(self._bfloat16_product, flat).float()
            else:
                output = self._bfloat16_product(flat).float()
            if self._bias is not None:
                output = output + self._bias
        else:
            if flat.device.type != "cpu":
                raise ConfigurationError("ELMo precision 'int8' runs on the CPU only; use 'bfloat16' on a GPU.")
            output = torch.ops.quantized.linear_dynamic(flat.float().contiguous(), self._packed, True)
        return output.to(inputs.dtype).view(*leading, self.out_features)

    def _bfloat16_product(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(inputs, self._weight)


def packed(linear: torch.nn.Linear, precision: str) -> Optional[PackedLinear]:
    """A `PackedLinear` of `linear` for a reduced precision, `None` for float32."""
    if precision == FLOAT32:
        return None
    return PackedLinear(linear.weight, linear.bias, precision)
