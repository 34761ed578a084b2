"""
Converting a biLM from any weight format into the published layout (options.json and
weights.hdf5, with our extensions where the biLM needs them), once, so that every ELMo tool
reads it.
"""
import json
import os
import shutil
import tempfile
from typing import Dict, Optional

from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import write_text_atomically
from elmo_plugin.common.overwrite_guard import refuse_writing_over_inputs
from elmo_plugin.data.vocab_file import VOCAB_FILE_NAME, write_bilm_vocab_file
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats import read_bilm_weights, write_bilm_weights
from elmo_plugin.weights.formats.published import OPTIONS_NAME, WEIGHTS_NAME
from elmo_plugin.weights.formats.tensorflow import SCALAR_MIX

# A TF-Hub module's trained layer mix: `Elmo(..., scalar_mix_parameters=...)` and its gamma.
SCALAR_MIX_NAME = "scalar_mix.json"


def convert_bilm(
    source: str,
    output_directory: str,
    options_file: Optional[str] = None,
    overwrite: bool = False,
    vocabulary_file: Optional[str] = None,
) -> Dict[str, str]:
    """
    Reads the biLM at `source` (any format: a model directory or archive, a TensorFlow
    checkpoint, a weight file with `options_file` beside it) and writes it into
    `output_directory` in the published layout. `vocabulary_file` is the vocabulary of a
    checkpoint's softmax (bilm-tf's do not hold it): with it the softmax is written too, and
    `vocab.txt`. A TF-Hub module's layer mix goes to `scalar_mix.json`. The files appear there
    only once all of them are complete; returns their paths by role.
    """
    refuse_writing_over_inputs(
        "elmo-import",
        [os.path.join(output_directory, name) for name in (OPTIONS_NAME, WEIGHTS_NAME, VOCAB_FILE_NAME, SCALAR_MIX_NAME)],
        [source, options_file, vocabulary_file],
    )
    weights = read_bilm_weights(options_file, source, vocabulary_file)
    if os.path.isfile(output_directory):
        raise ConfigurationError(f"elmo-import: {output_directory} is a file; give a directory to write into.")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(output_directory)) or ".",
                                     prefix=".elmo-import-") as staging:
        written = write_bilm_weights(weights, staging)
        if weights.options.softmax_in_weights:
            written["vocabulary"] = os.path.join(staging, VOCAB_FILE_NAME)
            write_bilm_vocab_file(written["vocabulary"], [str(word) for word in weights.arrays[layout.VOCABULARY]])
        if SCALAR_MIX in weights.extras:
            written[SCALAR_MIX] = os.path.join(staging, SCALAR_MIX_NAME)
            write_text_atomically(written[SCALAR_MIX], json.dumps(weights.extras[SCALAR_MIX], indent=2) + "\n")
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
