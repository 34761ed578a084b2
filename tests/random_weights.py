"""
Random biLM weights in the published layout, for tests and benchmarks that need a biLM of a
given architecture (the published ones cannot be downloaded everywhere).
"""
import os
from typing import Any, Dict, Tuple, Union

import numpy

from elmo_plugin.weights import layout
from elmo_plugin.weights.formats import BiLmWeights, write_bilm_weights
from elmo_plugin.weights.options import ElmoOptions


def random_weight_arrays(options: ElmoOptions, seed: int = 0) -> Dict[str, numpy.ndarray]:
    """
    Gaussian weights scaled by 1/sqrt(fan-in), so activations stay in the range where the
    gates, the clipping and the max-pooling all matter (neither saturated nor vanishing).
    """
    rng = numpy.random.default_rng(seed)
    arrays = {}
    for name, shape in layout.dataset_shapes(options).items():
        if name == "char_embed":
            scale = 1.0
        elif name.endswith("/B") or "/b_" in name:
            scale = 0.1
        elif name.startswith("CNN/W_cnn"):
            scale = 1.0 / numpy.sqrt(shape[1] * shape[2])
        else:
            scale = 1.0 / numpy.sqrt(shape[0])
        arrays[name] = (rng.standard_normal(shape) * scale).astype(numpy.float32)
    return arrays


def write_random_elmo(
    directory: Union[str, os.PathLike], options: Union[Dict[str, Any], ElmoOptions], seed: int = 0
) -> Tuple[str, str]:
    """Writes `options.json` and `weights.hdf5` with random weights; returns their paths."""
    if not isinstance(options, ElmoOptions):
        options = ElmoOptions.from_dict(options)
    weights = BiLmWeights(options, random_weight_arrays(options, seed), source="random weights")
    paths = write_bilm_weights(weights, os.fspath(directory), "published")
    return paths["options"], paths["weights"]
