"""
`allennlp elmo-token-vectors`: static word vectors from a biLM's char CNN (bilm-tf's
`dump_token_embeddings`; AllenNLP 2.x's `create_elmo_embeddings_from_vocab` tool no longer
works).

    allennlp elmo-token-vectors vocab.txt vectors --options-file options.json --weight-file weights.hdf5

writes `vectors.hdf5` (dataset `embedding`, `(n_words, projection_dim)` float32, rows in the
vocabulary's order, bilm-tf's layout) and `vectors.txt` (word2vec text: a `n_words dim` header,
then `word v1 ... vdim` per line), which an AllenNLP `embedding` reads as `pretrained_file`.
Each vector is layer 0 of the biLM for that word (its first half: layer 0 is the vector twice).
"""
import argparse
import logging
import os
from typing import Dict

import h5py
import numpy
from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError
from overrides import overrides

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.data.bilm_vocabulary import read_bilm_vocab_file
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.elmo_embedder import DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE

logger = logging.getLogger(__name__)

HDF5_DATASET = "embedding"


@Subcommand.register("elmo-token-vectors")
class ElmoTokenVectorsCommand(Subcommand):
    @overrides
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Write the char-CNN (context-free) vector of every word of a vocabulary file (one "
            "word per line) as OUTPUT_PREFIX.hdf5 and OUTPUT_PREFIX.txt (word2vec text)."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Static word vectors from a biLM."
        )
        subparser.add_argument("vocabulary_file", type=str, help="one word per line")
        subparser.add_argument("output_prefix", type=str, help="writes PREFIX.hdf5, PREFIX.txt")
        subparser.add_argument("--options-file", type=str, default=DEFAULT_OPTIONS_FILE)
        subparser.add_argument("--weight-file", type=str, default=DEFAULT_WEIGHT_FILE)
        subparser.add_argument("--cuda-device", type=int, default=-1, help="GPU id, -1 for CPU")
        subparser.add_argument("--overwrite", action="store_true", help="replace existing files")
        subparser.set_defaults(func=_token_vectors_command)
        return subparser


def _token_vectors_command(args: argparse.Namespace) -> None:
    paths = write_token_vectors(
        args.vocabulary_file, args.output_prefix, args.options_file, args.weight_file,
        cuda_device=args.cuda_device, overwrite=args.overwrite,
    )
    for role, path in paths.items():
        print(f"{role}: {path}")


def write_token_vectors(
    vocabulary_file: str,
    output_prefix: str,
    options_file: str,
    weight_file: str,
    cuda_device: int = -1,
    overwrite: bool = False,
) -> Dict[str, str]:
    """Writes the vectors (see the module docstring); returns the paths by format."""
    paths = {"hdf5": f"{output_prefix}.hdf5", "text": f"{output_prefix}.txt"}
    existing = [path for path in paths.values() if os.path.exists(path)]
    if existing and not overwrite:
        raise ConfigurationError(
            f"elmo-token-vectors: {', '.join(existing)} already exist; pass --overwrite."
        )
    # Any word list: bilm-tf's special tokens are allowed, not required.
    words = read_bilm_vocab_file(vocabulary_file, require_special_tokens=False)
    if not words:
        raise ConfigurationError(f"elmo-token-vectors: {vocabulary_file} holds no words.")
    bilm = ElmoBiLm(options_file, weight_file)
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
