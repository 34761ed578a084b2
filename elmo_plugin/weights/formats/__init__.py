"""
biLM weight formats, one module each in this package, behind one interface (`WeightFormat`).

Loading picks the format from what the given paths hold (`read_bilm_weights`); saving names
one (`write_bilm_weights`). Every module of this package is imported here, and each registers
its format with `@WeightFormat.register(name)`: adding a format is adding a module (and its
tests), nothing else.
"""
import importlib
import pkgutil

from elmo_plugin.weights.formats.base import (  # noqa: F401  (the package's interface)
    BiLmWeights,
    ModelFiles,
    WeightFormat,
    read_bilm,
    read_bilm_weights,
    registered_formats,
    write_bilm_weights,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
