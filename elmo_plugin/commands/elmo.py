"""
`allennlp elmo`: embed a text file with a biLM into HDF5 (AllenNLP 0.9's command, back).

    allennlp elmo sentences.txt out.hdf5 --all --options-file options.json --weight-file weights.hdf5
"""
import argparse
import logging

from allennlp.commands.subcommand import Subcommand
from allennlp.common import logging as common_logging
from allennlp.common.util import SigTermReceived
from overrides import overrides

from elmo_plugin.commands.errors import add_verbose_argument, one_line_errors
from elmo_plugin.inference.elmo_embedder import DEFAULT_MAX_TOKENS_PER_BATCH, ElmoEmbedder
from elmo_plugin.inference.embed_file_options import (
    COMPRESSIONS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_SIZE,
    DTYPES,
    EmbedFileOptions,
)
from elmo_plugin.inference.output_vectors import SENTENCE_VECTORS
from elmo_plugin.kernels.reduced_precision import FLOAT32, PRECISIONS

logger = logging.getLogger(__name__)


@Subcommand.register("elmo", exist_ok=True)
class ElmoCommand(Subcommand):
    @overrides
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Embed a file of whitespace-tokenized sentences (UTF-8, one per line) with a biLM "
            "and write one HDF5 dataset per line: all layers (3, n_tokens, D), the top layer or "
            "the layer average (n_tokens, D). By default the results are AllenNLP 0.9's: batches "
            "of consecutive lines, LSTM state carried from batch to batch. --deterministic gives "
            "vectors that depend on each sentence alone (every sentence starts from the same "
            "state; batched by length, faster)."
        )
        subparser = parser.add_parser(self.name, description=description, help="Embed a file with ELMo.")
        subparser.add_argument("input_file", type=str, help="the input text file")
        subparser.add_argument("output_file", type=str, help="the HDF5 file to write")
        layers = subparser.add_mutually_exclusive_group(required=True)
        layers.add_argument("--all", action="store_true", help="write all three layers")
        layers.add_argument("--top", action="store_true", help="write the top layer")
        layers.add_argument("--average", action="store_true", help="write the average of the layers")
        layers.add_argument("--mix", type=str, default=None, metavar="WEIGHTS[:GAMMA] or FILE",
                            help="write gamma * sum_k softmax(w)_k * layer_k: one weight per layer "
                            "and an optional gamma (0.1,0.5,-0.3:1.25), or a scalar_mix.json "
                            "(allennlp elmo-import writes a TF-Hub module's; its 'elmo' output)")
        subparser.add_argument("--sentence-vectors", choices=SENTENCE_VECTORS, default=None,
                               help="one vector per line instead of per token: the mean of the "
                               "written layers over the line's tokens (zeros for an empty line), "
                               "or that mean scaled to unit length")
        subparser.add_argument("--options-file", type=str, default=None,
                               help="biLM options JSON (path or URL); without either file: the "
                               "original ELMo")
        subparser.add_argument("--weight-file", type=str, default=None,
                               help="biLM weights (path or URL), or a model directory or archive "
                               "(an NLPL zip, an ELMoForManyLangs model) that holds the options too")
        subparser.add_argument("--batch-size", type=int, default=None,
                               help=f"sentences per batch: exactly, with carried state (default "
                               f"{DEFAULT_BATCH_SIZE}); at most, in deterministic mode (default: "
                               "as many as the token budget holds)")
        subparser.add_argument("--max-tokens-per-batch", type=int, default=DEFAULT_MAX_TOKENS_PER_BATCH,
                               help="token positions per batch (deterministic mode fills batches "
                               "up to it); a longer sentence is read in segments of this many "
                               "tokens, so memory is bounded by it whatever the sentence length")
        subparser.add_argument("--cuda-device", type=int, default=-1, help="GPU id, -1 for CPU")
        subparser.add_argument("--precision", choices=PRECISIONS, default=FLOAT32,
                               help="matrix products in reduced precision: faster, slightly "
                               "different vectors (int8: CPU only; see BENCHMARKS.md)")
        subparser.add_argument("--forget-sentences", action="store_true",
                               help="do not write the sentence_to_index dataset")
        subparser.add_argument("--use-sentence-keys", action="store_true",
                               help="key datasets by sentence instead of line index")
        state = subparser.add_mutually_exclusive_group()
        state.add_argument("--deterministic", action="store_true",
                           help="every sentence from the same LSTM state, batched by length: "
                           "vectors that depend on the sentence alone")
        state.add_argument("--stateful", action="store_true",
                           help="carry LSTM state across batches in file order (the default, 0.9's "
                           "results)")
        subparser.add_argument("--allow-empty-lines", action="store_true",
                               help="store blank lines as empty entries instead of refusing the file")
        subparser.add_argument("--resume", action="store_true",
                               help="continue an interrupted run (OUTPUT.partial)")
        subparser.add_argument("--overwrite", action="store_true",
                               help="replace an existing OUTPUT")
        subparser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                               help="lines per chunk: the unit of sorting and of resuming")
        subparser.add_argument("--num-workers", type=int, default=1,
                               help="local worker processes sharing the chunks (deterministic mode; "
                               "with --cuda-device D, worker i computes on GPU D+i, round the "
                               "machine's GPUs); under torchrun leave it at 1: the launched "
                               "processes share them")
        subparser.add_argument("--shard-size", type=_byte_count, default=None,
                               help="write the vectors into shards of about this size (e.g. 2G, "
                               "500M) beside the output, which links to them and reads as one file")
        subparser.add_argument("--dtype", choices=DTYPES, default="float32",
                               help="the vectors' type in the output: float16 halves its size at a "
                               "small cost in precision (BENCHMARKS.md)")
        subparser.add_argument("--compression", type=str, default=None,
                               help=f"an HDF5 filter for every sentence's vectors: {COMPRESSIONS}; "
                               "readers decompress transparently")
        subparser.add_argument("--file-friendly-logging", action="store_true",
                               help="progress suited to log files rather than terminals")
        add_verbose_argument(subparser)
        subparser.set_defaults(func=one_line_errors(elmo_command))
        return subparser


def elmo_command(args: argparse.Namespace) -> None:
    # Read by allennlp's Tqdm: fewer, newline-terminated progress updates.
    common_logging.FILE_FRIENDLY_LOGGING = args.file_friendly_logging
    options = EmbedFileOptions(
        output_format="all" if args.all else "top" if args.top else "average" if args.average else "mix",
        batch_size=args.batch_size,
        forget_sentences=args.forget_sentences,
        use_sentence_keys=args.use_sentence_keys,
        allow_empty_lines=args.allow_empty_lines,
        resume=args.resume,
        overwrite=args.overwrite,
        chunk_size=args.chunk_size,
        num_workers=args.num_workers,
        shard_size=args.shard_size,
        dtype=args.dtype,
        compression=args.compression,
        mix=args.mix,
        sentence_vectors=args.sentence_vectors,
    )
    embedder = ElmoEmbedder(args.options_file, args.weight_file, args.cuda_device,
                            stateful=not args.deterministic, precision=args.precision,
                            max_tokens_per_batch=args.max_tokens_per_batch)
    try:
        embedder.embed_file(args.input_file, args.output_file, options=options)
    except (KeyboardInterrupt, SigTermReceived) as interruption:
        logger.error(
            "%s. Finished chunks are kept in %s.partial; run the same command with --resume to "
            "continue.",
            "Interrupted" if isinstance(interruption, KeyboardInterrupt) else "Stopped (SIGTERM)",
            args.output_file,
        )
        raise SystemExit(130 if isinstance(interruption, KeyboardInterrupt) else 143)


_BYTE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _byte_count(text: str) -> int:
    """`2G`, `500M`, `1048576`: bytes (binary multiples)."""
    number, suffix = text.strip().upper().rstrip("B"), ""
    if number and number[-1] in _BYTE_SUFFIXES:
        number, suffix = number[:-1], number[-1]
    try:
        count = int(float(number) * _BYTE_SUFFIXES[suffix])
    except (ValueError, OverflowError):
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 2G, 500M or 1048576, got {text!r}")
    return count
