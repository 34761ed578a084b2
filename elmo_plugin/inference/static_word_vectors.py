"""
Static word vectors from a biLM's token layer, written to files (bilm-tf's
`dump_token_embeddings`; AllenNLP 2.x's `create_elmo_embeddings_from_vocab` tool no longer
works): `PREFIX.hdf5` (dataset `embedding`, `(n_words, projection_dim)` float32, rows in the
word list's order, bilm-tf's layout) and `PREFIX.txt` (word2vec text: a `n_words dim` header,
then `word v1 ... vdim` per line), which an AllenNLP `embedding` reads as `pretrained_file`.
Each vector is layer 0 of the biLM for that word (its first half: layer 0 is the vector twice).
"""
import logging
import os
from typing import Dict, Optional

import h5py
import numpy
from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.common.overwrite_guard import refuse_writing_over_inputs
from elmo_plugin.data.vocab_file import read_bilm_vocab_file
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.weights import pretrained

logger = logging.getLogger(__name__)

HDF5_DATASET = "embedding"


def write_token_vectors(
    vocabulary_file: str,
    output_prefix: str,
    options_file: Optional[str],
    weight_file: Optional[str],
    cuda_device: int = -1,
    overwrite: bool = False,
) -> Dict[str, str]:
    """Writes the vectors of every word of `vocabulary_file`; returns the paths by format."""
    paths = {"hdf5": f"{output_prefix}.hdf5", "text": f"{output_prefix}.txt"}
    refuse_writing_over_inputs("elmo-token-vectors", paths.values(), [vocabulary_file, options_file, weight_file])
    existing = [path for path in paths.values() if os.path.exists(path)]
    if existing and not overwrite:
        raise ConfigurationError(
            f"elmo-token-vectors: {', '.join(existing)} already exist; pass --overwrite."
        )
    # Any word list: bilm-tf's special tokens are allowed, not required.
    words = read_bilm_vocab_file(vocabulary_file, require_special_tokens=False)
    if not words:
        raise ConfigurationError(f"elmo-token-vectors: {vocabulary_file} holds no words.")
    bilm = ElmoBiLm(*pretrained.files_or_default(options_file, weight_file))
    if cuda_device >= 0:
        bilm = bilm.cuda(cuda_device)
    bilm.eval()
    vectors = bilm.token_vectors(words).cpu().numpy().astype(numpy.float32)
    directory = os.path.dirname(os.path.abspath(output_prefix))
    os.makedirs(directory, exist_ok=True)
    with atomic_output_path(paths["hdf5"]) as temporary_path:
        with h5py.File(temporary_path, "w") as handle:
            handle.create_dataset(HDF5_DATASET, data=vectors)
    with atomic_output_path(paths["text"]) as temporary_path:
        with open(temporary_path, "w", encoding="utf-8") as handle:
            handle.write(f"{vectors.shape[0]} {vectors.shape[1]}\n")
            for word, vector in zip(words, vectors):
                handle.write(word + " " + " ".join(repr(float(value)) for value in vector) + "\n")
    logger.info("Wrote %d vectors of dimension %d", *vectors.shape)
    return paths
