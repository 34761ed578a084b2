"""
Which implementation computes each of the biLM's matrix products.

The network blocks (`char_encoder`, `elmo_lstm`) are written as math: at the start of a
forward call they ask their `Kernels` for each product by its role and get back a function
`inputs -> inputs @ W^T + b`. The choice depends on the precision (the one owner of it is the
`Kernels` object a biLM shares with its blocks), the device, the dtype, whether autograd
records the product, and the role:

| role | float32 inference on the CPU | reduced precision |
|---|---|---|
| LSTM input, highway, char CNN | oneDNN (`onednn`) | packed copy (not the char CNN) |
| LSTM recurrent | one row: MKL packed (`mkl_packed`); more: oneDNN | packed copy |
| LSTM and char projections | `functional.linear` (MKL): oneDNN's long sums are less exact | packed copy |

This table is the fallback (`ELMO_PLUGIN_KERNEL_CHOICE=fixed`): by default each float32 CPU
inference product runs with the fastest of these kernels on this machine, measured at its first
use under an accuracy rule (`choice`). Float32 CPU products that autograd records (training)
run forward and backward by `recorded_products`, with MKL or oneDNN chosen the same way (the
same roles in the fixed table). Everything else (float64, a GPU) uses `functional.linear`. A new backend (a GPU kernel) is a new candidate or branch in
`Kernels.product`, and nothing in the blocks changes. The one elementwise function whose
implementation depends on the precision, the LSTM cell's `tanh`, is chosen here too
(`Kernels.tanh`).
"""
import contextlib
import weakref
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.kernels import choice, mkl_packed, onednn, recorded_products
from elmo_plugin.kernels.onednn import Product
from elmo_plugin.kernels.reduced_precision import FLOAT32, INT8, PackedLinear, approximate_tanh, check_precision
from elmo_plugin.kernels.roles import ONEDNN_ROLES, Role


# The char CNN's convolutions stay in float32 in every precision.
_REDUCED_PRECISION_ROLES = frozenset(Role) - {Role.CHAR_CNN}


def weight_matrix(layer: torch.nn.Module) -> torch.Tensor:
    """A `Linear`'s weight, or a `Conv1d`'s filters flattened to `(out, in x width)`: the
    product of the flattened filters with a window's `(in, width)` characters is the
    convolution at that window."""
    weight = layer.weight
    return weight if weight.dim() == 2 else weight.reshape(weight.size(0), -1)


def _plain_product(weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Product:
    def product(inputs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(inputs, weight, bias)

    return product


def _measured_choice(
    role: Role, weight: torch.Tensor, bias: Optional[torch.Tensor], candidates: Dict[str, Product]
) -> Product:
    """The fastest eligible candidate for each row-count class, decided at its first call
    (`choice`), then looked up here without asking again."""
    if len(candidates) == 1:
        return candidates["mkl"]
    shape = (weight.size(0), weight.size(1))
    labels: Dict[str, str] = {}

    def product(inputs: torch.Tensor) -> torch.Tensor:
        rows = choice.row_class(inputs.numel() // max(1, inputs.size(-1)))
        label = labels.get(rows)
        if label is None:
            if inputs.numel() == 0 or inputs.dtype is not torch.float32:
                return candidates["mkl"](inputs)
            label = labels[rows] = choice.chosen((role.value, shape, rows), candidates, inputs, weight, bias)
        return candidates[label](inputs)

    return product


def _parameter_versions(layer: torch.nn.Module) -> Tuple[Any, ...]:
    # Changes whenever a parameter is replaced, moved, converted or updated in place (a
    # parametrized bias is covered by its `original` parameter).
    return tuple(
        (parameter.data_ptr(), parameter._version, parameter.dtype, parameter.device)
        for parameter in layer.parameters()
    )


class Kernels:
    """
    The products of one biLM (its char encoder and LSTM stack share one object), and their
    precision.

    # Parameters

    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"`: the LSTM, highway and projection products from packed
        reduced-precision copies of the weights, for inference (see `reduced_precision`).
    """

    def __init__(self, precision: str = FLOAT32) -> None:
        check_precision(precision, requires_grad=False)
        self._precision = precision
        self._caches()

    def _caches(self) -> None:
        # Per layer: (versions of its parameters, derived weight). Weak keys: a layer that is
        # gone takes its copies with it.
        self._reduced: "weakref.WeakKeyDictionary[torch.nn.Module, Tuple[Any, PackedLinear]]" = (
            weakref.WeakKeyDictionary()
        )
        self._mkl_packed: "weakref.WeakKeyDictionary[torch.nn.Module, Tuple[Any, torch.Tensor]]" = (
            weakref.WeakKeyDictionary()
        )

    # Copies (deepcopy, pickle) start with empty caches: they are derived from the weights.
    def __getstate__(self) -> Dict[str, Any]:
        return {"_precision": self._precision}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._precision = state["_precision"]
        self._caches()

    @property
    def precision(self) -> str:
        return self._precision

    def set_precision(
        self, precision: str, requires_grad: bool = False, device: Optional[torch.device] = None
    ) -> None:
        """
        Products in `precision` from the next forward call on, checked against what the
        weights are for: inference only (`requires_grad`), int8 on the CPU only (`device`).
        """
        check_precision(precision, requires_grad)
        if precision == INT8 and device is not None and device.type != "cpu":
            raise ConfigurationError("ELMo precision 'int8' runs on the CPU only; use 'bfloat16' on a GPU.")
        self._precision = precision
        self._reduced.clear()

    @contextlib.contextmanager
    def precision_set_to(self, precision: str) -> Iterator[None]:
        """Within the block, products in `precision`; then back to the current one."""
        current = self._precision
        self._precision = precision
        try:
            yield
        finally:
            self._precision = current

    def tanh(self, inputs: torch.Tensor) -> torch.Tensor:
        """The LSTM cell's `tanh`: `approximate_tanh` on the CPU in reduced precision and in
        bfloat16 training (whose products round far more than its error), else PyTorch's (on a
        GPU its own is one kernel launch, the approximation three)."""
        float32_everywhere = self._precision == FLOAT32 and recorded_products.current_precision() == FLOAT32
        if float32_everywhere or inputs.device.type != "cpu":
            return torch.tanh(inputs)
        return approximate_tanh(inputs)

    def product(self, role: Role, layer: torch.nn.Module, rows: Optional[int] = None) -> Product:
        """
        The function that computes `layer`'s product for this forward call.

        # Parameters

        role : `Role`
            Which of the biLM's products `layer` computes.
        layer : `torch.nn.Module`
            A `Linear` or a `Conv1d` (see `weight_matrix`); its weight and bias are read once
            here (a parametrized bias is recomputed on every access).
        rows : `int`, optional
            The rows of every call, where they are the same at every call (the recurrent
            product of one sentence).
        """
        if self._precision != FLOAT32 and role in _REDUCED_PRECISION_ROLES:
            return self._reduced_precision_copy(role, layer)
        weight, bias = weight_matrix(layer), layer.bias
        if (
            weight.device.type != "cpu"
            or weight.dtype is not torch.float32
            or (bias is not None and bias.dtype is not torch.float32)
        ):
            return _plain_product(weight, bias)
        if torch.is_grad_enabled() and (weight.requires_grad or (bias is not None and bias.requires_grad)):
            return recorded_products.trained_product(role, weight, bias)
        one_row_packed = (
            role is Role.LSTM_RECURRENT and rows == 1 and not torch.is_grad_enabled() and mkl_packed.available()
        )
        if choice.mode() == choice.MEASURE:
            candidates = {"mkl": _plain_product(weight, bias)}
            if onednn.available():
                candidates["onednn"] = onednn.onednn_product(weight, bias)
            if one_row_packed:
                candidates["mkl_packed"] = mkl_packed.packed_product(self._mkl_packed_weight(layer, weight), weight, bias)
            return _measured_choice(role, weight, bias, candidates)
        if one_row_packed:
            return mkl_packed.packed_product(self._mkl_packed_weight(layer, weight), weight, bias)
        if role in ONEDNN_ROLES and onednn.available():
            return onednn.onednn_product(weight, bias)
        return _plain_product(weight, bias)

    def _reduced_precision_copy(self, role: Role, layer: torch.nn.Module) -> PackedLinear:
        key = (self._precision, _parameter_versions(layer))
        cached = self._reduced.get(layer)
        if cached is None or cached[0] != key:
            # The LSTM's input products are only ever added to the recurrent ones.
            keep_bfloat16 = role is Role.LSTM_INPUT
            cached = (key, PackedLinear(weight_matrix(layer), layer.bias, self._precision, keep_bfloat16))
            self._reduced[layer] = cached
        return cached[1]

    def _mkl_packed_weight(self, layer: torch.nn.Module, weight: torch.Tensor) -> torch.Tensor:
        key = (weight.data_ptr(), weight._version)
        cached = self._mkl_packed.get(layer)
        if cached is None or cached[0] != key:
            cached = (key, mkl_packed.pack(weight))
            self._mkl_packed[layer] = cached
        return cached[1]
