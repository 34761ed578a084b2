"""
Defaults for the environment variables the task configs in `training_config/` read.

AllenNLP hands the process environment to Jsonnet as external variables, and Jsonnet has no
way to give `std.extVar` a default: an unset variable is an error. So the defaults live here
and are put into the environment when the plugin is imported (which `allennlp` does before
it reads a config: `.allennlp_plugins` or `--include-package elmo_plugin`). Variables the
user has set are never changed.

- With none of `ELMO_OPTIONS_FILE`, `ELMO_WEIGHT_FILE`, `ELMO_DIM` set, the configs use the
  published original ELMo (2x4096_512_2048cnn_2xhighway, 1024 dimensions).
- With the two files set and `ELMO_DIM` unset, `ELMO_DIM` is read from the options file when
  it is a local file or a published URL; otherwise it stays unset and Jsonnet's error names it.

Data paths have no defaults: the task data sets (OntoNotes, CoNLL-2003, ...) cannot be
downloaded from a public URL, and a made-up default would only move the error elsewhere.
"""
import json
import logging
import os
from typing import Dict, MutableMapping, Optional

logger = logging.getLogger(__name__)

_PUBLISHED = "https://allennlp.s3.amazonaws.com/models/elmo/"

# Published ELMo options files and the size of the vectors they give (2 x projection_dim).
PUBLISHED_ELMO_DIMS: Dict[str, int] = {
    _PUBLISHED + "2x1024_128_2048cnn_1xhighway/elmo_2x1024_128_2048cnn_1xhighway_options.json": 256,
    _PUBLISHED + "2x2048_256_2048cnn_1xhighway/elmo_2x2048_256_2048cnn_1xhighway_options.json": 512,
    _PUBLISHED + "2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json": 1024,
    _PUBLISHED + "2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_options.json": 1024,
}

ORIGINAL_ELMO = {
    "ELMO_OPTIONS_FILE": _PUBLISHED
    + "2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json",
    "ELMO_WEIGHT_FILE": _PUBLISHED
    + "2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
    "ELMO_DIM": "1024",
}


def elmo_dim_of(options_file: str) -> Optional[int]:
    """The ELMo vector size an options file gives, if it can be known without a download."""
    if options_file in PUBLISHED_ELMO_DIMS:
        return PUBLISHED_ELMO_DIMS[options_file]
    path = options_file[len("file://"):] if options_file.startswith("file://") else options_file
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return 2 * int(json.load(handle)["lstm"]["projection_dim"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        # The config's ELMo embedder reads the same file and reports the problem properly.
        logger.debug("Cannot read the ELMo size from %s: %s", path, error)
        return None


def apply_config_environment_defaults(environment: MutableMapping[str, str] = os.environ) -> None:
    """Fills in the ELMo variables of `training_config/` that `environment` lacks."""
    if not any(name in environment for name in ORIGINAL_ELMO):
        environment.update(ORIGINAL_ELMO)
    elif "ELMO_DIM" not in environment and "ELMO_OPTIONS_FILE" in environment:
        dim = elmo_dim_of(environment["ELMO_OPTIONS_FILE"])
        if dim is not None:
            environment["ELMO_DIM"] = str(dim)
