"""
`allennlp elmo-import`: a biLM in any format this package reads -> the published layout
(`elmo_plugin.weights.conversion`).

    allennlp elmo-import zhs.model elmo_files/                 # an ELMoForManyLangs model
    allennlp elmo-import 182.zip elmo_files/                   # an NLPL zip
    allennlp elmo-import bilm_save_dir/ elmo_files/ --vocab-file vocab.txt   # a bilm-tf checkpoint
    allennlp elmo-import elmo_3/ elmo_files/                   # a TF-Hub module (directory or .tar.gz)
"""
import argparse

from allennlp.commands.subcommand import Subcommand
from overrides import overrides

from elmo_plugin.commands.errors import add_verbose_argument, one_line_errors
from elmo_plugin.weights.conversion import convert_bilm


@Subcommand.register("elmo-import")
class ElmoImportCommand(Subcommand):
    @overrides
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Convert a biLM (a model directory or archive in any format this package reads: a "
            "bilm-tf checkpoint, a TF-Hub module, an ELMoForManyLangs model, an NLPL zip; or a "
            "weight file with --options-file) into options.json and weights.hdf5 in the "
            "published layout, written only when complete. No TensorFlow needed."
        )
        subparser = parser.add_parser(self.name, description=description, help="Convert a biLM into ELMo files.")
        subparser.add_argument("source", type=str, help="the biLM: path or URL")
        subparser.add_argument("output_directory", type=str, help="where to write options.json, weights.hdf5")
        subparser.add_argument("--options-file", type=str, default=None,
                               help="the options of a weight file that does not hold them")
        subparser.add_argument("--vocab-file", type=str, default=None,
                               help="the vocabulary a checkpoint was trained with: its softmax is "
                               "then written too (and vocab.txt), for fine-tuning to start from it")
        subparser.add_argument("--overwrite", action="store_true", help="replace files already there")
        add_verbose_argument(subparser)
        subparser.set_defaults(func=one_line_errors(_import_command))
        return subparser


def _import_command(args: argparse.Namespace) -> None:
    paths = convert_bilm(args.source, args.output_directory, args.options_file, overwrite=args.overwrite,
                         vocabulary_file=args.vocab_file)
    for role, path in paths.items():
        print(f"{role}: {path}")
