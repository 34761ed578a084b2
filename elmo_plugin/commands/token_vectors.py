"""
`allennlp elmo-token-vectors`: static word vectors from a biLM's char CNN
(`elmo_plugin.inference.static_word_vectors`).

    allennlp elmo-token-vectors vocab.txt vectors --options-file options.json --weight-file weights.hdf5
"""
import argparse

from allennlp.commands.subcommand import Subcommand
from overrides import overrides

from elmo_plugin.commands.errors import add_verbose_argument, one_line_errors
from elmo_plugin.inference.static_word_vectors import write_token_vectors


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
        subparser.add_argument("--options-file", type=str, default=None,
                               help="biLM options (without either file: the original ELMo)")
        subparser.add_argument("--weight-file", type=str, default=None,
                               help="biLM weights, or a model directory or archive")
        subparser.add_argument("--cuda-device", type=int, default=-1, help="GPU id, -1 for CPU")
        subparser.add_argument("--overwrite", action="store_true", help="replace existing files")
        add_verbose_argument(subparser)
        subparser.set_defaults(func=one_line_errors(_token_vectors_command))
        return subparser


def _token_vectors_command(args: argparse.Namespace) -> None:
    paths = write_token_vectors(
        args.vocabulary_file, args.output_prefix, args.options_file, args.weight_file,
        cuda_device=args.cuda_device, overwrite=args.overwrite,
    )
    for role, path in paths.items():
        print(f"{role}: {path}")
