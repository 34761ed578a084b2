"""
How a file is embedded (`allennlp elmo`, `ElmoEmbedder.embed_file`): one frozen object, built
once from the command line or from Python, validated when built, and handed unchanged to the
engine (`embed_file`) and its worker processes.

Adding an option: a field here (with its check in `__post_init__` and, if a resumed run must
share it, a line in `resume.RunSettings`), an argument in `commands/elmo.py`, and its use in
the engine.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from allennlp.common.checks import ConfigurationError

from elmo_plugin.inference.output_vectors import LayerMix, OutputVectors

# Lines per chunk: the unit of sorting, of resuming, of sharing out among processes and of
# what an interrupt can lose.
DEFAULT_CHUNK_SIZE = 4096
# Sentences per batch with carried state (0.9's default), and the default of embed_sentences.
DEFAULT_BATCH_SIZE = 64
# The vectors' type in the output: float32 (as computed), or float16 (half the size).
DTYPES = ("float32", "float16")
COMPRESSIONS = "gzip, gzip:LEVEL (LEVEL 0-9) or lzf"


@dataclass(frozen=True)
class EmbedFileOptions:
    """
    # Parameters

    output_format : `str`, optional (default = `"all"`)
        `"all"` (every layer), `"top"` (the last layer), `"average"` (their mean) or `"mix"`
        (the layers mixed with `mix`'s weights).
    batch_size : `int`, optional (default = `None`)
        Sentences per batch: in stateful mode exactly (0.9's batches; `DEFAULT_BATCH_SIZE` if
        not given), in deterministic mode at most, besides the token budget (if not given, the
        token budget alone: many short sentences fill a batch).
    forget_sentences : `bool`, optional (default = `False`)
        Do not write the `sentence_to_index` dataset.
    use_sentence_keys : `bool`, optional (default = `False`)
        Key each dataset by its sentence instead of its line index. A repeated sentence is
        stored once (in deterministic mode its vectors are identical; in stateful mode the
        first occurrence is kept).
    allow_empty_lines : `bool`, optional (default = `False`)
        Store blank lines as empty `(3, 0, D)` entries instead of refusing the file.
    resume : `bool`, optional (default = `False`)
        Continue an interrupted run from `OUTPUT.partial`.
    overwrite : `bool`, optional (default = `False`)
        Replace an existing output (and discard a partial run).
    chunk_size : `int`, optional (default = `DEFAULT_CHUNK_SIZE`)
        Lines per chunk (rounded up to a multiple of the batch size in stateful mode).
    num_workers : `int`, optional (default = `1`)
        Local worker processes (torch.distributed with gloo), each with its share of the CPU's
        threads and, for an embedder on a GPU, the GPU after the previous worker's (round the
        machine's GPUs: several may share one); deterministic mode only. Under `torchrun` leave
        it at 1: the launched processes share the work, each on its `LOCAL_RANK`-th GPU.
    shard_size : `int`, optional (default = `None`)
        Write the vectors into shards of about this many bytes beside the output, which then
        holds links to them (read as if the data were in it).
    dtype : `str`, optional (default = `"float32"`)
        The vectors' type in the output: `"float32"` as computed, or `"float16"` (half the
        size; BENCHMARKS.md gives its error).
    compression : `str`, optional (default = `None`)
        An HDF5 filter for every sentence's dataset: `"gzip"` (level 4), `"gzip:LEVEL"` (0-9)
        or `"lzf"`. Each sentence stays its own dataset, so one reads without the others;
        h5py (and so any reader of the file) decompresses transparently.
    mix : `Union[LayerMix, str]`, optional (default = `None`)
        With `output_format="mix"`: the layer weights (before their softmax) and gamma, as a
        `LayerMix` or as `LayerMix.parse` reads them (`"w0,w1,w2[:gamma]"`, or a
        `scalar_mix.json`). A TF-Hub module's mix gives its `elmo` output.
    sentence_vectors : `str`, optional (default = `None`)
        One vector per line instead of one per token: `"mean"` or `"unit-mean"` of the
        written layers (see `OutputVectors`).
    """

    output_format: str = "all"
    batch_size: Optional[int] = None
    forget_sentences: bool = False
    use_sentence_keys: bool = False
    allow_empty_lines: bool = False
    resume: bool = False
    overwrite: bool = False
    chunk_size: int = DEFAULT_CHUNK_SIZE
    num_workers: int = 1
    shard_size: Optional[int] = None
    dtype: str = "float32"
    compression: Optional[str] = None
    mix: Optional[Union[LayerMix, str]] = None
    sentence_vectors: Optional[str] = None

    def __post_init__(self) -> None:
        output = OutputVectors(self.output_format, self.mix, self.sentence_vectors)  # checks those three
        object.__setattr__(self, "mix", output.mix)  # frozen: the mix parsed once, there
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be positive, got {self.batch_size}")
        if self.chunk_size < 1:
            raise ConfigurationError(f"chunk_size must be positive (lines per chunk), got {self.chunk_size}")
        if self.num_workers < 1:
            raise ConfigurationError(f"num_workers must be positive, got {self.num_workers}")
        if self.shard_size is not None and self.shard_size < 1:
            raise ConfigurationError(f"shard_size must be positive (bytes per shard), got {self.shard_size}")
        if self.dtype not in DTYPES:
            raise ConfigurationError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        self.hdf5_filter()  # checks `compression`

    def hdf5_filter(self) -> Dict[str, Any]:
        """`compression` as h5py's `create_dataset` arguments (none without compression)."""
        if self.compression is None:
            return {}
        name, _, level = self.compression.partition(":")
        if name == "lzf" and not level:
            return {"compression": "lzf"}
        if name == "gzip" and (not level or (level.isascii() and level.isdigit() and int(level) <= 9)):
            return {"compression": "gzip", "compression_opts": int(level) if level else 4}
        raise ConfigurationError(f"compression must be {COMPRESSIONS}, got {self.compression!r}")

    def output_vectors(self) -> OutputVectors:
        return OutputVectors(self.output_format, self.mix, self.sentence_vectors)  # type: ignore[arg-type]

    def batch_size_for(self, stateful: bool) -> Optional[int]:
        """The batch size a run uses: 0.9's default with carried state when none is given."""
        return DEFAULT_BATCH_SIZE if self.batch_size is None and stateful else self.batch_size
