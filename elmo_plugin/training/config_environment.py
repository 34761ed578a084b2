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
  it is a local file or a published URL, or from the biLM when it is a local model directory or
  archive (of any weight format: an `elmo_bilm` model's `model.tar.gz`, ELMoForManyLangs,
  ...), which reads the model once per command; otherwise it stays unset and Jsonnet's error
  names it.

Why on import, and not where the config is read: AllenNLP reads a config in `Params.from_file`,
which hands Jsonnet `os.environ` as it is and has no hook for other variables; the plugin's
import (by `allennlp`, before it reads any config) is the last point this package runs before
that. Only these three variables are set, only when unset, so nothing the user set changes.

Data paths have no defaults: the task data sets (OntoNotes, CoNLL-2003, ...) cannot be
downloaded from a public URL, and a made-up default would only move the error elsewhere.
"""
import logging
import os
from typing import MutableMapping, Optional

from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights import archives, pretrained
from elmo_plugin.weights.formats import read_bilm
from elmo_plugin.weights.options import ElmoOptions

logger = logging.getLogger(__name__)

ORIGINAL_ELMO = {
    "ELMO_OPTIONS_FILE": pretrained.ORIGINAL.options_file,
    "ELMO_WEIGHT_FILE": pretrained.ORIGINAL.weight_file,
    "ELMO_DIM": str(pretrained.ORIGINAL.output_dim),
}


def elmo_dim_of(options_file: str) -> Optional[int]:
    """The ELMo vector size an options file gives, if it can be known without a download."""
    published_dim = pretrained.output_dim_of_published(options_file)
    if published_dim is not None:
        return published_dim
    path = options_file[len("file://"):] if options_file.startswith("file://") else options_file
    try:
        if os.path.isdir(path) or archives.is_archive(path):
            # A whole model: its options are in whatever format it is in.
            dim = read_bilm(path, None)[0].output_dim
            logger.info("ELMO_DIM=%d read from the biLM %s (set ELMO_DIM to skip reading it).", dim, path)
            return dim
        if os.path.isfile(path):
            return ElmoOptions.from_local_file(path, options_file).output_dim
    except (OSError, ConfigurationError) as error:
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
