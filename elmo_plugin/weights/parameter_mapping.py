"""
How a network block's parameters correspond to the datasets of the weight layout (`layout`).

Each block that holds biLM weights defines, beside its own code, the two directions of the
correspondence (`MapsToWeightLayout`): its parameters from the layout's arrays, and the arrays
from its parameters, with names relative to the block. A block's mapping must name exactly its
parameters; `tests/weights/test_parameter_mapping.py` checks every block, so renaming an
attribute fails there rather than when a user loads a file.
"""
from typing import Dict, Mapping, Protocol

import numpy
import torch

from elmo_plugin.weights import layout

Arrays = Dict[str, numpy.ndarray]


class MapsToWeightLayout(Protocol):
    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """The block's parameter values (names relative to the block) from layout arrays."""
        ...

    def arrays_from_parameters(self) -> Arrays:
        """The layout arrays the block's parameters give (inverse of `parameters_from_arrays`)."""
        ...


def parameter_array(tensor: torch.Tensor) -> numpy.ndarray:
    """A parameter as a float32 numpy array on the CPU (for `arrays_from_parameters`)."""
    return tensor.detach().cpu().to(torch.float32).numpy()


def with_prefix(prefix: str, values: Mapping[str, numpy.ndarray]) -> Arrays:
    """`values` with `prefix.` before every name (a block's mapping inside its owner)."""
    return {f"{prefix}.{name}": value for name, value in values.items()}


def copy_into_parameters(module: torch.nn.Module, values: Mapping[str, numpy.ndarray]) -> None:
    """
    Copies `values` into `module`'s parameters, converting to their dtype and device. The names
    must be exactly the module's parameters: a mapping that misses or invents one is a bug in
    the block's mapping, reported by name.
    """
    parameters = dict(module.named_parameters())
    missing, unknown = set(parameters) - set(values), set(values) - set(parameters)
    if missing or unknown:
        raise ValueError(
            f"The weight mapping of {type(module).__name__} does not match its parameters: "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    with torch.no_grad():
        for name, parameter in parameters.items():
            value = torch.from_numpy(numpy.ascontiguousarray(values[name], dtype=numpy.float32))
            if value.shape != parameter.shape:
                raise ValueError(
                    f"The weight mapping of {type(module).__name__} gives {name} the shape "
                    f"{tuple(value.shape)}; the parameter has {tuple(parameter.shape)}"
                )
            parameter.copy_(value)


class TfForgetBias(torch.nn.Module):
    """
    A parametrization (`torch.nn.utils.parametrize`) of an LSTM cell's gate bias that stores it
    as the published weight files do: without TF's forget bias of 1.0. The cell's effective
    bias is the stored one plus 1.0 on the forget block, added in float32 exactly as the
    loaders (AllenNLP's and ours) add it when they read a file. A bias trained this way is
    written to a file unchanged and read back bit-identical; a bias trained with the 1.0
    folded in could not be, since `b - 1.0` rounds to a coarser float32 grid than `b`.

    # Parameters

    cell_size : `int`
        The cell's memory size; gates are in the order (input, forget, memory, output).
    """

    def __init__(self, cell_size: int) -> None:
        super().__init__()
        offset = torch.zeros(4 * cell_size, dtype=torch.float32)
        offset[cell_size : 2 * cell_size] = layout.TF_FORGET_BIAS
        self.register_buffer("offset", offset, persistent=False)

    # In float32 whatever the module's dtype (`.double()` converts the offset buffer too).
    def forward(self, stored_bias: torch.Tensor) -> torch.Tensor:
        return (stored_bias.float() + self.offset.float()).to(stored_bias.dtype)

    def right_inverse(self, effective_bias: torch.Tensor) -> torch.Tensor:
        return (effective_bias.float() - self.offset.float()).to(effective_bias.dtype)
