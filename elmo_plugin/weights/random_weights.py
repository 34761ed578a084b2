"""
Random biLM weights in the published layout, for tests and benchmarks that need a biLM of a
given architecture (the published ones cannot be downloaded everywhere).
"""
import os
from typing import Any, Dict, Tuple, Union

import numpy

from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions

# The published architectures (their options files minus training-only keys).
SMALL_OPTIONS: Dict[str, Any] = {
    "lstm": {"use_skip_connections": True, "projection_dim": 128, "cell_clip": 3,
             "proj_clip": 3, "dim": 1024, "n_layers": 2},
    "char_cnn": {"activation": "relu",
                 "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                 "n_highway": 1, "embedding": {"dim": 16}, "n_characters": 262,
                 "max_characters_per_token": 50},
}
ORIGINAL_OPTIONS: Dict[str, Any] = {
    "lstm": {"use_skip_connections": True, "projection_dim": 512, "cell_clip": 3,
             "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "char_cnn": {"activation": "relu",
                 "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                 "n_highway": 2, "embedding": {"dim": 16}, "n_characters": 262,
                 "max_characters_per_token": 50},
}


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
    os.makedirs(directory, exist_ok=True)
    options_path = os.path.join(directory, "options.json")
    weight_path = os.path.join(directory, "weights.hdf5")
    options.to_file(options_path)
    layout.write_weight_file(weight_path, random_weight_arrays(options, seed), options)
    return options_path, weight_path
