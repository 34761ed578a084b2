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
