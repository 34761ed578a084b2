"""
`allennlp elmo-export`: a trained `elmo_bilm` model -> the published ELMo files.

    allennlp elmo-export out/model.tar.gz elmo_files/
    allennlp elmo-export out/ elmo_files/      # a serialization directory (best.th)

Writes `options.json` and `weights.hdf5` (bilm-tf's `dump_weights.py` layout, loadable by
AllenNLP's and our `Elmo`, `allennlp elmo`, ...) and `vocab.txt` (the softmax vocabulary in
bilm-tf's format, for fine-tuning with the same vocabulary).
"""
import argparse
import dataclasses
import logging
import os
from typing import Dict

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from overrides import overrides

from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary, write_bilm_vocab_file
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.weights import layout

logger = logging.getLogger(__name__)

OPTIONS_NAME = "options.json"
WEIGHTS_NAME = "weights.hdf5"
VOCABULARY_NAME = "vocab.txt"


@Subcommand.register("elmo-export")
class ElmoExportCommand(Subcommand):
    @overrides
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Export a trained elmo_bilm model (model.tar.gz or its serialization directory) as "
            f"ELMo files: {OPTIONS_NAME} and {WEIGHTS_NAME} in the published layout, and "
            f"{VOCABULARY_NAME}."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Export a trained biLM as ELMo files."
        )
        subparser.add_argument("archive", type=str, help="model.tar.gz or serialization directory")
        subparser.add_argument("output_directory", type=str, help="where to write the files")
        subparser.add_argument(
            "--overwrite", action="store_true", help="replace files already in output_directory"
        )
        subparser.set_defaults(func=_export_command)
        return subparser


def _export_command(args: argparse.Namespace) -> None:
    paths = export_bilm(args.archive, args.output_directory, overwrite=args.overwrite)
    for role, path in paths.items():
        print(f"{role}: {path}")


def export_bilm(archive: str, output_directory: str, overwrite: bool = False) -> Dict[str, str]:
    """
    Writes the biLM of an `elmo_bilm` archive (or serialization directory) as ELMo files into
    `output_directory`; returns their paths by role (`options`, `weights`, `vocabulary`). Each
    file is written to a temporary name and renamed when complete.
    """
    _refuse_to_overwrite(output_directory, overwrite)
    if not os.path.exists(archive):
        raise ConfigurationError(f"elmo-export: no such archive or directory: {archive}")
    model = load_archive(archive).model
    if not isinstance(model, ElmoBiLmModel):
        raise ConfigurationError(
            f"elmo-export: {archive} holds a {type(model).__name__}, not an elmo_bilm model."
        )
    paths = export_bilm_model(model, output_directory, overwrite)
    logger.info("Exported the biLM of %s to %s", archive, output_directory)
    return paths


def export_bilm_model(
    model: ElmoBiLmModel, output_directory: str, overwrite: bool = False
) -> Dict[str, str]:
    """`export_bilm` for a model in memory (e.g. one trained by a script, not by `allennlp train`)."""
    paths = _refuse_to_overwrite(output_directory, overwrite)
    bilm = model.bilm
    words = BiLmVocabulary.words(model.vocab)
    # bilm-tf's training keys, as the published options files carry them.
    extra = dict(bilm.options.extra)
    extra.update(
        bidirectional=True, dropout=model.dropout, n_negative_samples_batch=model.num_samples
    )
    options = dataclasses.replace(bilm.options, n_tokens_vocab=len(words), extra=extra)
    os.makedirs(output_directory, exist_ok=True)
    layout.write_weight_file(paths["weights"], bilm.weight_arrays(), options)
    options.to_file(paths["options"])
    write_bilm_vocab_file(paths["vocabulary"], words)
    return paths


def _refuse_to_overwrite(output_directory: str, overwrite: bool) -> Dict[str, str]:
    """The export's file paths by role; raises if any exists and `overwrite` is not set."""
    paths = {
        "options": os.path.join(output_directory, OPTIONS_NAME),
        "weights": os.path.join(output_directory, WEIGHTS_NAME),
        "vocabulary": os.path.join(output_directory, VOCABULARY_NAME),
    }
    existing = [path for path in paths.values() if os.path.exists(path)]
    if existing and not overwrite:
        raise ConfigurationError(
            f"elmo-export: {', '.join(existing)} already exist; pass --overwrite to replace them."
        )
    return paths
