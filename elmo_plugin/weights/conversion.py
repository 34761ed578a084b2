"""
Converting a biLM from any weight format into the published layout (options.json and
weights.hdf5, with our extensions where the biLM needs them), once, so that every ELMo tool
reads it.
"""
import os
import shutil
import tempfile
from typing import Dict, Optional

from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights.formats import read_bilm_weights, write_bilm_weights


def convert_bilm(
    source: str, output_directory: str, options_file: Optional[str] = None, overwrite: bool = False
) -> Dict[str, str]:
    """
    Reads the biLM at `source` (any format: a model directory or archive, a weight file with
    `options_file` beside it) and writes it into `output_directory` in the published layout.
    The files appear there only once all of them are complete; returns their paths by role.
    """
    weights = read_bilm_weights(options_file, source)
    if os.path.isfile(output_directory):
        raise ConfigurationError(f"elmo-import: {output_directory} is a file; give a directory to write into.")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(output_directory)) or ".",
                                     prefix=".elmo-import-") as staging:
        written = write_bilm_weights(weights, staging)
        targets = {role: os.path.join(output_directory, os.path.basename(path)) for role, path in written.items()}
        existing = [path for path in targets.values() if os.path.exists(path)]
        if existing and not overwrite:
            raise ConfigurationError(
                f"elmo-import: {', '.join(existing)} already exist; pass --overwrite to replace them."
            )
        os.makedirs(output_directory, exist_ok=True)
        for role, path in written.items():
            shutil.move(path, targets[role])
    return targets
