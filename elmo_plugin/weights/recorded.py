"""
The ELMo a trained AllenNLP model was built from, recorded in the model's own weights file, so
that its archive loads where the ELMo files named in its config are not: another directory
(a relative path), another machine, an offline server.

A config names its ELMo by files (`options_file`, `weight_file`), and AllenNLP builds the model
from its config again when it loads an archive, before it loads the archive's weights. The
biLM's parameters are in those weights; what is not is the architecture (the options) and the
word lists some token layers read (a word-input biLM's words, ELMoForManyLangs' characters and
words). `ElmoBiLm` writes these into its entry of the state dict's metadata (`_metadata`, which
`torch.save` keeps and `load_state_dict` ignores, so the state dict's keys stay AllenNLP's). When
a model is built with a `serialization_dir` (AllenNLP passes it while training and while
loading) whose weights record a biLM read from the same files, the biLM is built from that
record and the files are not read: the archive is what the model was trained with.
"""
import logging
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import get_weights_path

from elmo_plugin.weights.formats import BiLmWeights, read_bilm
from elmo_plugin.weights.options import ElmoOptions

logger = logging.getLogger(__name__)

# The key of the record in a biLM's entry of the state dict's metadata.
RECORD_KEY = "elmo_plugin.bilm"

FileName = Union[str, os.PathLike, ElmoOptions, None]


def file_names(options_file: FileName, weight_file: FileName) -> List[Optional[str]]:
    """The files as a config names them: the key a record is found by (parsed options have no
    file, so `None`)."""
    return [
        None if name is None or isinstance(name, ElmoOptions) else os.fspath(name)
        for name in (options_file, weight_file)
    ]


def bilm_record(
    options: ElmoOptions,
    files: Sequence[Optional[str]],
    vocabularies: Dict[str, List[str]],
    cached_word_boundaries: Optional[Tuple[torch.Tensor, torch.Tensor]],
) -> Dict[str, Any]:
    """
    What `recorded_bilm` needs to build the biLM again, in the plain types `torch.load`
    reads with `weights_only=True`.

    # Parameters

    options : `ElmoOptions`
        The biLM's architecture.
    files : `Sequence[Optional[str]]`
        The options and weight file as the config names them (`file_names`).
    vocabularies : `Dict[str, List[str]]`
        The word lists the token layer reads, by their names in the layout.
    cached_word_boundaries : `Tuple[torch.Tensor, torch.Tensor]`, optional
        The `<S>` and `</S>` vectors of a `vocab_to_cache` cache, which are computed once, from
        the token layer as it was built, and are not in the state dict.
    """
    return {
        "options": options.to_dict(),
        "files": list(files),
        "vocabularies": {name: list(words) for name, words in vocabularies.items()},
        "cached_word_boundaries": None
        if cached_word_boundaries is None
        else [vector.detach().cpu().clone() for vector in cached_word_boundaries],
    }


def trained_weights_path(serialization_dir: Union[str, os.PathLike]) -> Optional[str]:
    """The weights file AllenNLP loads a model from in `serialization_dir` (an archive's
    `weights.th`, else a serialization directory's `best.th`), if there is one."""
    path = get_weights_path(serialization_dir)
    return path if os.path.isfile(path) else None


def recorded_bilm(
    serialization_dir: Union[str, os.PathLike], files: Sequence[Optional[str]]
) -> Optional[BiLmWeights]:
    """
    The biLM read from `files` that the trained model in `serialization_dir` recorded, as
    weights holding only its vocabularies (`holds_parameters` false); `None` where there is no
    trained model there (training from the start) or it records no biLM from these files (a
    model trained before biLMs were recorded, or with AllenNLP's own ELMo).
    """
    path = trained_weights_path(serialization_dir)
    if path is None or not any(files):
        return None
    try:
        # Memory-mapped: only the small pickled part is read, not the tensors' bytes.
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # an older serialization, a damaged file: AllenNLP will say so
        logger.debug("No ELMo record read from %s: %s", path, error)
        return None
    metadata = getattr(state, "_metadata", None) or {}
    records = [
        entry[RECORD_KEY] for entry in metadata.values() if entry.get(RECORD_KEY, {}).get("files") == list(files)
    ]
    if not records:
        return None
    record = records[0]
    source = f"the ELMo recorded in {path}"
    options = ElmoOptions.from_dict(record["options"], source=source)
    arrays = {name: numpy.array(words, dtype=object) for name, words in record["vocabularies"].items()}
    boundaries = record.get("cached_word_boundaries")
    logger.info(
        "The ELMo of this trained model is built from what its weights record (%s); %s not read.",
        os.path.basename(path),  # an archive's directory is a temporary one
        " and ".join(dict.fromkeys(name for name in files if name is not None)),
    )
    return BiLmWeights(
        options=options,
        arrays=arrays,
        source=source,
        extras={} if boundaries is None else {"cached_word_boundaries": tuple(boundaries)},
        holds_parameters=False,
    )


def read_bilm_of_model(
    options_file: Union[str, ElmoOptions, None],
    weight_file: Optional[str],
    serialization_dir: Optional[Union[str, os.PathLike]],
) -> Tuple[ElmoOptions, Optional[BiLmWeights]]:
    """
    `read_bilm` for a biLM inside an AllenNLP model: what the trained model in
    `serialization_dir` recorded of it where it did, else its files. Where the files cannot be
    read for a trained model that recorded nothing, the error says why they are needed.
    """
    files = file_names(options_file, weight_file)
    if serialization_dir is not None:
        weights = recorded_bilm(serialization_dir, files)
        if weights is not None:
            return weights.options, weights
    try:
        return read_bilm(options_file, weight_file)
    except ConfigurationError as error:
        if serialization_dir is None or trained_weights_path(serialization_dir) is None:
            raise
        # Not the directory's name: an archive's is a temporary one.
        raise ConfigurationError(
            f"{error} The trained model being loaded was built from this ELMo, and its weights do "
            "not record it (a model trained with AllenNLP's own ELMo, or before elmo_plugin "
            "recorded it): run from the directory it was trained in (its config's relative paths "
            "start there), or give the files' new place with --overrides."
        ) from error
