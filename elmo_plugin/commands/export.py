"""
`allennlp elmo-export`: a trained `elmo_bilm` model -> the published ELMo files
(`elmo_plugin.models.export`).

    allennlp elmo-export out/model.tar.gz elmo_files/
    allennlp elmo-export out/ elmo_files/      # a serialization directory (best.th)
"""
import argparse

from allennlp.commands.subcommand import Subcommand
from overrides import overrides

from elmo_plugin.commands.errors import add_verbose_argument, one_line_errors
from elmo_plugin.data.vocab_file import VOCAB_FILE_NAME
from elmo_plugin.models.export import export_bilm
from elmo_plugin.weights.formats.published import OPTIONS_NAME, WEIGHTS_NAME


@Subcommand.register("elmo-export")
class ElmoExportCommand(Subcommand):
    @overrides
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Export a trained elmo_bilm model (model.tar.gz or its serialization directory) as "
            f"ELMo files: {OPTIONS_NAME} and {WEIGHTS_NAME} in the published layout, and "
            f"{VOCAB_FILE_NAME}."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Export a trained biLM as ELMo files."
        )
        subparser.add_argument("archive", type=str, help="model.tar.gz or serialization directory")
        subparser.add_argument("output_directory", type=str, help="where to write the files")
        subparser.add_argument(
            "--overwrite", action="store_true", help="replace files already in output_directory"
        )
        subparser.add_argument(
            "--with-softmax", action="store_true",
            help="also write the trained softmax and its words into the weight file (for "
            "fine-tuning from it; ELMo users do not need it, and it can be large)",
        )
        add_verbose_argument(subparser)
        subparser.set_defaults(func=one_line_errors(_export_command))
        return subparser


def _export_command(args: argparse.Namespace) -> None:
    paths = export_bilm(args.archive, args.output_directory, overwrite=args.overwrite,
                        with_softmax=args.with_softmax)
    for role, path in paths.items():
        print(f"{role}: {path}")
