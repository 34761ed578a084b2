"""
The ELMo models AllenNLP published: where their files are, their architectures and the size
of the vectors they give. The one place these facts are written down.
"""
import copy
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

_BASE_URL = "https://allennlp.s3.amazonaws.com/models/elmo/"


@dataclass(frozen=True)
class PretrainedElmo:
    """A published ELMo: its files' URLs and the size of one layer's vectors (2 x projection)."""

    name: str
    options_file: str
    weight_file: str
    output_dim: int


def _published(name: str, output_dim: int) -> PretrainedElmo:
    prefix = f"{_BASE_URL}{name}/elmo_{name}"
    return PretrainedElmo(name, f"{prefix}_options.json", f"{prefix}_weights.hdf5", output_dim)


SMALL = _published("2x1024_128_2048cnn_1xhighway", 256)
MEDIUM = _published("2x2048_256_2048cnn_1xhighway", 512)
ORIGINAL = _published("2x4096_512_2048cnn_2xhighway", 1024)
ORIGINAL_5_5B = _published("2x4096_512_2048cnn_2xhighway_5.5B", 1024)
PRETRAINED_ELMO = {model.name: model for model in (SMALL, MEDIUM, ORIGINAL, ORIGINAL_5_5B)}

# What AllenNLP's ELMo defaults to everywhere (`ElmoEmbedder`, `allennlp elmo`, the embedder).
DEFAULT = ORIGINAL

_CHAR_CNN = {
    "activation": "relu",
    "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
    "embedding": {"dim": 16},
    "n_characters": 262,
    "max_characters_per_token": 50,
}


def _architecture(cell_dim: int, projection_dim: int, n_highway: int) -> Dict[str, Any]:
    return {
        "lstm": {"use_skip_connections": True, "projection_dim": projection_dim, "cell_clip": 3,
                 "proj_clip": 3, "dim": cell_dim, "n_layers": 2},
        "char_cnn": dict(copy.deepcopy(_CHAR_CNN), n_highway=n_highway),
    }


# The published options files minus their training-only keys (for random weights of these
# architectures in tests and benchmarks, and for training configs).
SMALL_OPTIONS: Dict[str, Any] = _architecture(1024, 128, 1)
ORIGINAL_OPTIONS: Dict[str, Any] = _architecture(4096, 512, 2)
# By the names the benchmarks' `--architecture` takes.
ARCHITECTURE_OPTIONS: Dict[str, Dict[str, Any]] = {"small": SMALL_OPTIONS, "original": ORIGINAL_OPTIONS}


def files_or_default(options_file: Optional[str], weight_file: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """The files given, or the default published ELMo's when neither is (a model directory or
    archive may be given as either file alone)."""
    if options_file is None and weight_file is None:
        return DEFAULT.options_file, DEFAULT.weight_file
    return options_file, weight_file


def output_dim_of_published(options_file: str) -> Optional[int]:
    """The vector size of a published options URL, or `None` for any other file."""
    for model in PRETRAINED_ELMO.values():
        if model.options_file == options_file:
            return model.output_dim
    return None
