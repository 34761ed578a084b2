"""
A trained `elmo_bilm` model -> ELMo files: the biLM in a weight format (the published one by
default: `options.json` and `weights.hdf5`, loadable by AllenNLP's and our `Elmo`,
`allennlp elmo`, ...) and `vocab.txt` (the softmax vocabulary in bilm-tf's format, for
fine-tuning with the same vocabulary).
"""
import dataclasses
import logging
import os
from typing import Dict

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmo_plugin.common.overwrite_guard import refuse_writing_over_inputs
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.vocab_file import VOCAB_FILE_NAME, write_bilm_vocab_file
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.weights.formats import BiLmWeights, write_bilm_weights
from elmo_plugin.weights.formats.published import OPTIONS_NAME, WEIGHTS_NAME

logger = logging.getLogger(__name__)


def export_bilm(
    archive: str, output_directory: str, overwrite: bool = False, with_softmax: bool = False
) -> Dict[str, str]:
    """
    Writes the biLM of an `elmo_bilm` archive (or serialization directory) as ELMo files into
    `output_directory`; returns their paths by role (`options`, `weights`, `vocabulary`). Each
    file is written to a temporary name and renamed when complete. `with_softmax` adds the
    trained softmax and its words to the weight file (`softmax_in_weights`, see `layout`),
    for fine-tuning to start from; AllenNLP's ELMo and ours ignore them.
    """
    refuse_writing_over_inputs(
        "elmo-export", [os.path.join(output_directory, name) for name in (OPTIONS_NAME, WEIGHTS_NAME, VOCAB_FILE_NAME)],
        [archive],
    )
    _refuse_to_overwrite(output_directory, overwrite)
    if not os.path.exists(archive):
        raise ConfigurationError(f"elmo-export: no such archive or directory: {archive}")
    try:
        model = load_archive(archive).model
    except ConfigurationError:
        raise
    except Exception as error:  # torch, tarfile and pickle each raise their own on a damaged file
        damaged = os.path.join(archive, "best.th") if os.path.isdir(archive) else archive
        raise ConfigurationError(
            f"elmo-export: cannot load the model of {archive}: {damaged} is damaged or truncated "
            f"({type(error).__name__}: {error}). Export from an intact archive or directory."
        ) from error
    if not isinstance(model, ElmoBiLmModel):
        raise ConfigurationError(
            f"elmo-export: {archive} holds a {type(model).__name__}, not an elmo_bilm model."
        )
    paths = export_bilm_model(model, output_directory, overwrite, with_softmax)
    logger.info("Exported the biLM of %s to %s", archive, output_directory)
    return paths


def export_bilm_model(
    model: ElmoBiLmModel, output_directory: str, overwrite: bool = False, with_softmax: bool = False
) -> Dict[str, str]:
    """`export_bilm` for a model in memory (e.g. one trained by a script, not by `allennlp train`)."""
    vocabulary_path = _refuse_to_overwrite(output_directory, overwrite)
    weights = bilm_weights_of_model(model, with_softmax, source=type(model).__name__)
    paths = write_bilm_weights(weights, output_directory, "published")
    write_bilm_vocab_file(vocabulary_path, BiLmVocabulary.words(model.vocab))
    return {**paths, "vocabulary": vocabulary_path}


def bilm_weights_of_model(model: ElmoBiLmModel, with_softmax: bool, source: str) -> BiLmWeights:
    """The biLM of `model` as every weight format reads and writes it (see `export_bilm`)."""
    bilm = model.bilm
    # bilm-tf's training keys, as the published options files carry them.
    extra = dict(bilm.options.extra)
    extra.update(
        bidirectional=True, dropout=model.dropout, n_negative_samples_batch=model.num_samples
    )
    options = dataclasses.replace(
        bilm.options,
        n_tokens_vocab=len(BiLmVocabulary.words(model.vocab)),
        softmax_in_weights=with_softmax,
        extra=extra,
    )
    arrays = bilm.weight_arrays()
    if with_softmax:
        arrays.update(model.softmax_arrays())
    return BiLmWeights(options=options, arrays=arrays, source=source)


def _refuse_to_overwrite(output_directory: str, overwrite: bool) -> str:
    """Raises if an export's file exists in `output_directory` and `overwrite` is not set;
    returns the vocabulary's path."""
    names = (OPTIONS_NAME, WEIGHTS_NAME, VOCAB_FILE_NAME)
    existing = [
        os.path.join(output_directory, name)
        for name in names
        if os.path.exists(os.path.join(output_directory, name))
    ]
    if existing and not overwrite:
        raise ConfigurationError(
            f"elmo-export: {', '.join(existing)} already exist; pass --overwrite to replace them."
        )
    return os.path.join(output_directory, VOCAB_FILE_NAME)
