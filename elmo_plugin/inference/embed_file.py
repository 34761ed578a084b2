"""
Embedding a text file into HDF5 with the biLM: the engine of `allennlp elmo` and
`ElmoEmbedder.embed_file`. The output format is AllenNLP 0.9's (see `hdf5_output`).

How the work is organised, and why:

- A first pass validates the whole input (UTF-8, blank lines, sentence keys) so that a bad
  line fails the run before any compute is spent, with its line number.
- The input is cut into chunks of consecutive lines. In deterministic mode each chunk's lines
  are sorted by length and batched up to `max_tokens_per_batch` token positions, so there is
  almost no padding; results go back to their original keys. In stateful mode (0.9's
  behaviour) batches are consecutive lines in file order, `batch_size` each, so the carried
  state is what 0.9 computed. A line longer than `max_tokens_per_batch` is read in segments
  and written segment by segment: memory is bounded by the budget, not by the line.
- Each finished chunk is written to its own file in `OUTPUT.partial/` and renamed into place
  when complete (flushed to the disk first), so an interrupt (Ctrl-C, kill, disk full, power
  loss) loses at most the chunk in flight; `resume` checks the chunks on disk, embeds again any
  that is damaged, and skips the others (in stateful mode it restores the carried state saved
  with the chunk before each one it embeds). A resumed run must have the settings of the run
  it continues, the same model (its weights' fingerprint), precision and device type. At the
  end the chunks are merged into a temporary file next to OUTPUT (and shards beside it, with
  `shard_size`), which is renamed to OUTPUT: a file under OUTPUT's name is always complete.
- Several processes (`num_workers`, or a `torchrun` launch; `workers`): the first checks the
  input and prepares `OUTPUT.partial`, each embeds the chunks whose index is its rank modulo
  their number, the first merges. Chunks do not depend on who embeds them, so the output is
  the one process's, byte for byte, and a resumed run may use another number of processes.
  Carried state runs through the file in order: stateful mode takes one process.
- One run at a time writes an OUTPUT: a second one is refused while the first holds
  `OUTPUT.lock`.
"""
import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterator, List, Optional, Protocol, Set, Tuple

import filelock
import h5py
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.tqdm import Tqdm

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.common.text_files import without_bom
from elmo_plugin.inference import workers
from elmo_plugin.inference.batching import rows_within_token_budget
from elmo_plugin.inference.hdf5_output import (
    CARRIED_STATE,
    ChunkWriter,
    chunk_name,
    hdf5_errors_as_os_errors,
    hdf5_for_writing,
    leftover_merges,
    merge_chunks,
)
from elmo_plugin.modules.start_state import BatchStartState

logger = logging.getLogger(__name__)


class SentenceEmbedder(Protocol):
    """What the engine needs of an embedder (`ElmoEmbedder` is one). To run in several
    processes it must also pickle (each worker gets its own copy)."""

    @property
    def stateful(self) -> bool:
        """Whether the LSTM state is carried from batch to batch (0.9's file-order batches)."""
        ...

    @property
    def batch_start_state(self) -> BatchStartState:
        """The carried state, saved with every chunk and restored on resume."""
        ...

    @property
    def max_tokens_per_batch(self) -> int:
        """Token positions per batch, and per segment of a longer sentence."""
        ...

    @property
    def num_layers(self) -> int:
        ...

    @property
    def output_dim(self) -> int:
        ...

    def embed_batch_into(self, batch: List[List[str]], writer) -> None:
        """Each sentence's vectors to `writer`, whole or in segments (`ElmoEmbedder`)."""
        ...

    def identity(self) -> Dict[str, str]:
        """What a resumed run must share besides its settings: the model, how it computes."""
        ...


OUTPUT_FORMATS = ("all", "top", "average")
# Lines per chunk: the unit of sorting, of resuming, of sharing out among processes and of
# what an interrupt can lose.
DEFAULT_CHUNK_SIZE = 4096
# Sentences per batch with carried state (0.9's default), and the default of embed_sentences.
DEFAULT_BATCH_SIZE = 64
_MAX_LINES_IN_MESSAGE = 10


@dataclass
class _RunSettings:
    """Everything a resumed run must share with the run it continues."""

    input_path: str
    input_size: int
    input_sha256: str
    output_format: str
    batch_size: Optional[int]
    max_tokens_per_batch: int
    chunk_size: int
    stateful: bool
    use_sentence_keys: bool
    allow_empty_lines: bool
    shard_size: Optional[int]
    model: str
    precision: str
    device: str


@dataclass
class _InputSummary:
    num_lines: int
    num_tokens: int
    sha256: str
    chunk_sha256: List[str]  # of each chunk's bytes, to find an input changed during the run


@dataclass(frozen=True)
class _Request:
    """What was asked (the arguments of `embed_file`), as every worker process receives it."""

    input_path: str
    output_path: str
    output_format: str
    batch_size: Optional[int]  # None: deterministic batches by the token budget alone
    forget_sentences: bool
    use_sentence_keys: bool
    allow_empty_lines: bool
    resume: bool
    overwrite: bool
    chunk_size: int
    shard_size: Optional[int]

    @property
    def partial_dir(self) -> str:
        return self.output_path + ".partial"


@dataclass(frozen=True)
class _Plan:
    """What the first process found and prepared, for all of them."""

    chunk_size: int
    num_chunks: int
    done_chunks: frozenset
    num_lines: int
    num_tokens: int
    identity: Tuple[Tuple[str, str], ...]
    chunk_sha256: Tuple[str, ...]
    input_size: int


def embed_file(
    embedder: SentenceEmbedder,
    input_path: str,
    output_path: str,
    output_format: str = "all",
    batch_size: Optional[int] = None,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    allow_empty_lines: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    num_workers: int = 1,
    shard_size: Optional[int] = None,
) -> None:
    """
    Embeds `input_path` (UTF-8, one whitespace-tokenized sentence per line) into
    `output_path`. See the module docstring for the format and the guarantees.

    # Parameters

    embedder : `SentenceEmbedder`
        The biLM (an `ElmoEmbedder`); its `stateful` flag selects 0.9's file-order batching,
        its `max_tokens_per_batch` the batches' token budget.
    input_path : `str`
        The text file.
    output_path : `str`
        The HDF5 file; it appears only when complete.
    output_format : `str`, optional (default = `"all"`)
        `"all"`, `"top"` or `"average"`.
    batch_size : `int`, optional (default = `None`)
        Sentences per batch: in stateful mode exactly (0.9's batches; 64 if not given), in
        deterministic mode at most, besides the token budget (if not given, the token budget
        alone: many short sentences fill a batch).
    forget_sentences : `bool`, optional (default = `False`)
        Do not write `sentence_to_index`.
    use_sentence_keys : `bool`, optional (default = `False`)
        Key each dataset by its sentence. A repeated sentence is stored once (in deterministic
        mode its vectors are identical; in stateful mode the first occurrence is kept).
    allow_empty_lines : `bool`, optional (default = `False`)
        Store blank lines as empty `(3, 0, D)` entries instead of refusing the file.
    resume : `bool`, optional (default = `False`)
        Continue an interrupted run from `output_path + ".partial"`.
    overwrite : `bool`, optional (default = `False`)
        Replace an existing `output_path` (and discard a partial run).
    chunk_size : `int`, optional (default = `4096`)
        Lines per chunk (rounded up to a multiple of `batch_size` in stateful mode).
    num_workers : `int`, optional (default = `1`)
        Local worker processes (CPU, torch.distributed with gloo), each with its share of the
        CPU's threads; deterministic mode only. Under `torchrun` leave it at 1: the launched
        processes share the work.
    shard_size : `int`, optional (default = `None`)
        Write the vectors into shards of about this many bytes beside OUTPUT, which then holds
        links to them (read as if the data were in it).
    """
    if output_format not in OUTPUT_FORMATS:
        raise ConfigurationError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    if batch_size is None and embedder.stateful:
        batch_size = DEFAULT_BATCH_SIZE
    if batch_size is not None and batch_size < 1:
        raise ConfigurationError(f"batch_size must be positive, got {batch_size}")
    if chunk_size < 1:
        raise ConfigurationError(f"chunk_size must be positive (lines per chunk), got {chunk_size}")
    if num_workers < 1:
        raise ConfigurationError(f"num_workers must be positive, got {num_workers}")
    if shard_size is not None and shard_size < 1:
        raise ConfigurationError(f"shard_size must be positive (bytes per shard), got {shard_size}")
    request = _Request(input_path, output_path, output_format, batch_size, forget_sentences,
                       use_sentence_keys, allow_empty_lines, resume, overwrite, chunk_size, shard_size)
    _check_paths(input_path, output_path, overwrite)
    if num_workers == 1:
        with workers.process_group_of_launcher():
            _run(request, embedder)
        return
    if workers.rank_and_world()[1] > 1:
        raise ConfigurationError(
            f"num_workers is {num_workers} in a run that torch.distributed already started "
            "(torchrun): its processes share the work; leave num_workers at 1."
        )
    _check_can_share_work(embedder, num_workers)
    run = functools.partial(_run, request, expected_identity=embedder.identity())
    workers.spawn_workers(run, embedder, num_workers, output_path)


def _check_can_share_work(embedder: SentenceEmbedder, world: int) -> None:
    if embedder.stateful:
        raise ConfigurationError(
            f"{world} worker processes in stateful mode: the carried state runs through the file "
            "in order, so one process must read it all. Use deterministic mode (--deterministic; "
            "ElmoEmbedder(stateful=False)) to share the work."
        )
    device = getattr(embedder, "device", torch.device("cpu"))
    if torch.device(device).type != "cpu":
        raise ConfigurationError(
            f"{world} worker processes on {device}: several workers run on the CPU only "
            "(sharing GPUs among them is untested)."
        )


def _check_paths(input_path: str, output_path: str, overwrite: bool) -> None:
    """Everything about the paths that can be known before any work."""
    if not os.path.isfile(input_path):
        raise ConfigurationError(_not_a_regular_file(input_path))
    if os.path.isdir(output_path):
        raise ConfigurationError(f"Output {output_path} is a directory; give the HDF5 file to write")
    if os.path.exists(output_path) and os.path.samefile(input_path, output_path):
        raise ConfigurationError(
            f"Output {output_path} is the input file; writing it would destroy the input"
        )
    if os.path.exists(output_path) and not overwrite:
        raise ConfigurationError(
            f"Output file {output_path} already exists; pass --overwrite to replace it"
        )
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)


def _not_a_regular_file(input_path: str) -> str:
    """What is wrong with an input that is not a regular file."""
    if input_path == "-" or (os.path.exists(input_path) and not os.path.isdir(input_path)):
        what = "standard input" if input_path == "-" else "a pipe or a device, not a regular file"
        return (
            f"Input {input_path} is {what}: allennlp elmo reads its input several times (to check "
            "it, to embed it, to key the vectors) and resumes from it, so it must be a file. Save "
            "the text first (e.g. `... > sentences.txt`) and embed that file"
        )
    if os.path.isdir(input_path):
        return f"Input {input_path} is a directory; give a text file with one sentence per line"
    return f"Input file {input_path} does not exist"


@contextlib.contextmanager
def _sole_writer(output_path: str) -> Iterator[None]:
    """Holds `OUTPUT.lock` for the run: a second run on the same output is refused."""
    lock_path = output_path + ".lock"
    lock = filelock.FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout as error:
        raise ConfigurationError(
            f"Another process is writing {output_path} (it holds {lock_path}); wait for it to "
            "finish, or write to another output"
        ) from error
    try:
        yield
    finally:
        lock.release()
        with contextlib.suppress(OSError):
            os.remove(lock_path)


def _run(request: _Request, embedder: SentenceEmbedder, expected_identity: Optional[Dict[str, str]] = None) -> None:
    """One process's part of a run (the whole run in a single process). `expected_identity`:
    that of the embedder a worker's copy was made from."""
    rank, world = workers.rank_and_world()
    identity = embedder.identity()  # a digest of every weight: computed once per process
    if expected_identity is not None and identity != expected_identity:
        raise ConfigurationError(
            f"The embedder's copy in worker {rank} differs from the embedder given "
            f"({_differences(expected_identity, identity)}): it would compute other "
            "vectors than the one process would. Embed with one process (num_workers=1)."
        )
    if world > 1:
        _check_can_share_work(embedder, world)
    with contextlib.ExitStack() as held:

        def prepare() -> _Plan:
            # The first process holds the lock for the run; if it cannot, all learn why.
            held.enter_context(_sole_writer(request.output_path))
            return _prepare(request, embedder, identity)

        plan = workers.from_first(prepare)
        if dict(plan.identity) != identity:
            raise ConfigurationError(
                f"Worker {rank}'s biLM differs from worker 0's ({_differences(dict(plan.identity), identity)}): "
                "every worker must load the same model, precision and device type."
            )
        if rank == 0:
            _warn_if_few_chunks(plan, world)
        succeeded = False
        try:
            _embed_share(request, plan, embedder, rank, world)
            succeeded = True
        finally:
            everyone_succeeded = workers.all_succeeded(succeeded)
        if not everyone_succeeded:
            raise RuntimeError(
                f"Another embedding worker failed (see its error); worker {rank} finished its "
                f"chunks, which are kept in {request.partial_dir}: run the same command with --resume."
            )
        if rank == 0:
            _finish(request, plan)


def _warn_if_few_chunks(plan: _Plan, world: int) -> None:
    to_embed = plan.num_chunks - len(plan.done_chunks)
    if 1 < world and to_embed < 2 * world:
        logger.warning(
            "%d chunks to embed for %d processes: a process embeds whole chunks, so some wait "
            "while others work; a smaller --chunk-size (now %d lines) shares the work better.",
            to_embed, world, plan.chunk_size,
        )


def _differences(first: Dict[str, str], second: Dict[str, str]) -> str:
    return ", ".join(sorted(key for key in first if first.get(key) != second.get(key)))


def _prepare(request: _Request, embedder: SentenceEmbedder, identity: Dict[str, str]) -> _Plan:
    """Validates the input and prepares `OUTPUT.partial` (the first process only); `identity`
    is `embedder.identity()`."""
    chunk_size = request.chunk_size
    if embedder.stateful:
        assert request.batch_size is not None  # embed_file gives stateful runs 0.9's default
        chunk_size = -(-chunk_size // request.batch_size) * request.batch_size
    partial_dir = request.partial_dir
    for leftover in leftover_merges(request.output_path):  # of a killed run: we hold the lock
        logger.info("Removing %s, left by a run killed while merging", leftover)
        os.remove(leftover)
    if os.path.exists(partial_dir) and not request.resume:
        if not request.overwrite:
            raise ConfigurationError(
                f"{partial_dir} holds an interrupted run; pass --resume to continue it or "
                f"--overwrite to start over"
            )
        shutil.rmtree(partial_dir)
    input_size = os.path.getsize(request.input_path)
    summary = _validate_input(request.input_path, request.use_sentence_keys, request.forget_sentences,
                              request.allow_empty_lines, chunk_size)
    settings = _RunSettings(
        input_path=os.path.abspath(request.input_path),
        input_size=input_size,
        input_sha256=summary.sha256,
        output_format=request.output_format,
        batch_size=request.batch_size,
        max_tokens_per_batch=embedder.max_tokens_per_batch,
        chunk_size=chunk_size,
        stateful=embedder.stateful,
        use_sentence_keys=request.use_sentence_keys,
        allow_empty_lines=request.allow_empty_lines,
        shard_size=request.shard_size,
        **identity,
    )
    done_chunks = _prepare_partial_dir(partial_dir, settings, request.resume)
    done_chunks = _intact_chunks(partial_dir, done_chunks, chunk_size, summary.num_lines)
    return _Plan(
        chunk_size=chunk_size,
        num_chunks=-(-summary.num_lines // chunk_size),
        done_chunks=frozenset(done_chunks),
        num_lines=summary.num_lines,
        num_tokens=summary.num_tokens,
        identity=tuple(sorted(identity.items())),
        chunk_sha256=tuple(summary.chunk_sha256),
        input_size=input_size,
    )


def _embed_share(request: _Request, plan: _Plan, embedder: SentenceEmbedder, rank: int, world: int) -> None:
    """Embeds the unfinished chunks whose index is `rank` modulo `world`."""
    mine = [index for index in range(plan.num_chunks) if index % world == rank]
    lines_of_mine = sum(min(plan.chunk_size, plan.num_lines - index * plan.chunk_size) for index in mine)
    embedder.batch_start_state.reset()
    # Stateful (one process): whether the carried state is the one at the end of the previous chunk.
    state_follows_previous_chunk = True
    progress = Tqdm.tqdm(total=lines_of_mine, unit="sentences", desc="embedding", disable=rank != 0)
    tokens_done = 0
    start_time = time.monotonic()
    for chunk_index, lines in _read_chunks(request.input_path, plan, request.partial_dir):
        if chunk_index % world != rank:
            continue
        if chunk_index in plan.done_chunks:
            progress.update(len(lines))
            state_follows_previous_chunk = False
            continue
        if embedder.stateful and not state_follows_previous_chunk:
            _restore_carried_state(embedder, os.path.join(request.partial_dir, chunk_name(chunk_index - 1)))
            state_follows_previous_chunk = True
        chunk_path = os.path.join(request.partial_dir, chunk_name(chunk_index))
        try:
            _embed_chunk(embedder, chunk_path, chunk_index * plan.chunk_size, lines, request.batch_size,
                         request.output_format)
        except OSError as error:
            raise OSError(
                error.errno,
                f"Cannot write {chunk_path} ({error}); the chunks finished before it are kept in "
                f"{request.partial_dir}: free the space (or fix the problem) and run the same "
                "command with --resume",
            ) from error
        tokens_done += sum(len(line.split()) for line in lines)
        progress.update(len(lines))
        progress.set_postfix(tokens_per_s=f"{tokens_done / max(time.monotonic() - start_time, 1e-9):.0f}")
    progress.close()


def _finish(request: _Request, plan: _Plan) -> None:
    """Merges the chunks into OUTPUT (the first process, once every chunk is there)."""
    if os.path.getsize(request.input_path) != plan.input_size:
        raise _input_changed(request.input_path, "its size", request.partial_dir)
    sentences = (line for _, lines in _read_chunks(request.input_path, plan, request.partial_dir) for line in lines)
    try:
        written = merge_chunks(request.partial_dir, request.output_path, plan.num_chunks, sentences,
                               request.use_sentence_keys, request.forget_sentences, request.shard_size)
    except OSError as error:
        raise OSError(
            error.errno,
            f"Cannot write {request.output_path} ({error}); nothing was written under that name "
            f"and the finished chunks are kept in {request.partial_dir}: free the space (or fix "
            "the problem) and run the same command with --resume",
        ) from error
    shutil.rmtree(request.partial_dir)
    shards = f" (and {len(written) - 1} shards beside it)" if len(written) > 1 else ""
    logger.info("Wrote %d sentences (%d tokens) to %s%s", plan.num_lines, plan.num_tokens,
                request.output_path, shards)


def _sentence_of(raw_line: bytes) -> str:
    # split() drops "\r" of "\r\n" line ends and any run of spaces or tabs.
    return " ".join(raw_line.decode("utf-8").split())


def _iterate_lines(input_path: str) -> Iterator[Tuple[int, bytes]]:
    with open(input_path, "rb") as handle:
        for index, raw_line in enumerate(handle):
            yield index, without_bom(raw_line) if index == 0 else raw_line


def _format_lines(line_numbers: List[int]) -> str:
    shown = ", ".join(str(n + 1) for n in line_numbers[:_MAX_LINES_IN_MESSAGE])
    more = len(line_numbers) - _MAX_LINES_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def _validate_input(
    input_path: str, use_sentence_keys: bool, forget_sentences: bool, allow_empty_lines: bool, chunk_size: int
) -> _InputSummary:
    """
    One streaming pass: every problem is reported with its (1-based) line number; the file's
    digest (which identifies the input of a resumed run) and each chunk's are taken in the
    same read.
    """
    empty_lines: List[int] = []
    bad_keys: List[int] = []
    num_lines = num_tokens = 0
    digest = hashlib.sha256()
    chunk_digests: List[str] = []
    chunk_digest = hashlib.sha256()
    for index, raw_line in _iterate_lines(input_path):
        digest.update(raw_line)
        chunk_digest.update(raw_line)
        if (index + 1) % chunk_size == 0:
            chunk_digests.append(chunk_digest.hexdigest())
            chunk_digest = hashlib.sha256()
        try:
            sentence = _sentence_of(raw_line)
        except UnicodeDecodeError as error:
            raise ConfigurationError(
                f"{input_path}, line {index + 1}: not valid UTF-8 ({error.reason} at byte "
                f"{error.start} of the line); ELMo input must be UTF-8 text"
            ) from error
        num_lines += 1
        tokens = sentence.split()
        num_tokens += len(tokens)
        if not tokens:
            empty_lines.append(index)
        if use_sentence_keys and ("/" in sentence or sentence in ("", ".")):
            bad_keys.append(index)
    if num_lines == 0:
        raise ConfigurationError(f"{input_path} is empty: there is nothing to embed")
    if num_lines % chunk_size:
        chunk_digests.append(chunk_digest.hexdigest())
    if empty_lines and not allow_empty_lines:
        raise ConfigurationError(
            f"{input_path} has blank lines (line {_format_lines(empty_lines)}); remove them or "
            f"pass --allow-empty-lines to store them as empty entries under their line index"
        )
    if bad_keys:
        raise ConfigurationError(
            f"{input_path}: with --use-sentence-keys, line {_format_lines(bad_keys)} cannot be an "
            f"HDF5 dataset name (it contains '/', or is '.' or empty); use line-index keys instead"
        )
    return _InputSummary(num_lines=num_lines, num_tokens=num_tokens, sha256=digest.hexdigest(),
                         chunk_sha256=chunk_digests)


def _prepare_partial_dir(partial_dir: str, settings: _RunSettings, resume: bool) -> Set[int]:
    manifest_path = os.path.join(partial_dir, "settings.json")
    if resume and os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            earlier = json.load(handle)
        if earlier != asdict(settings):
            differing = sorted(k for k in earlier if earlier.get(k) != asdict(settings).get(k))
            if differing and set(differing) <= {"input_size", "input_sha256"}:
                raise ConfigurationError(
                    f"Cannot resume from {partial_dir}: {settings.input_path} has changed since the "
                    "interrupted run read it (its size or content differ), and its finished chunks "
                    "hold the old text's vectors. Restore the input, or pass --overwrite to start "
                    "over with the new text"
                )
            raise ConfigurationError(
                f"Cannot resume from {partial_dir}: it was started with different "
                f"{', '.join(differing)} (a resumed run must compute what the first one did); "
                "pass --overwrite to start over"
            )
        for name in os.listdir(partial_dir):
            if name.startswith("."):  # a chunk that was being written when the run stopped
                os.remove(os.path.join(partial_dir, name))
        done = {
            int(name[len("chunk_") : -len(".hdf5")])
            for name in os.listdir(partial_dir)
            if name.startswith("chunk_") and name.endswith(".hdf5")
        }
        logger.info("Resuming: %d finished chunks in %s", len(done), partial_dir)
        return done
    if resume:
        logger.info("Nothing to resume at %s; starting from the beginning", partial_dir)
    os.makedirs(partial_dir, exist_ok=True)
    with open(manifest_path, "w") as handle:
        json.dump(asdict(settings), handle, indent=2)
    return set()


def _intact_chunks(partial_dir: str, done: Set[int], chunk_size: int, num_lines: int) -> Set[int]:
    """
    The finished chunks that hold every line they should; a damaged one (a power loss before
    its data reached the disk, a file changed by hand) is removed, to be embedded again.
    """
    intact = set()
    for chunk_index in sorted(done):
        path = os.path.join(partial_dir, chunk_name(chunk_index))
        expected = {str(i) for i in range(chunk_index * chunk_size, min((chunk_index + 1) * chunk_size, num_lines))}
        try:
            with h5py.File(path, "r") as handle:
                keys = {name for name in handle if not name.startswith("_")}
        except OSError as error:
            problem = f"unreadable ({error})"
        else:
            if keys == expected:
                intact.add(chunk_index)
                continue
            problem = f"holds {len(keys & expected)} of its {len(expected)} lines"
        logger.warning("%s is damaged: %s; embedding that chunk again", path, problem)
        os.remove(path)
    return intact


def _read_chunks(input_path: str, plan: _Plan, partial_dir: str) -> Iterator[Tuple[int, List[str]]]:
    """The input's chunks of sentences, each checked against its digest from the start of the
    run: text changed in between would mix two versions of the input in one output."""
    chunk: List[str] = []
    chunk_index = 0
    digest = hashlib.sha256()
    for _, raw_line in _iterate_lines(input_path):
        digest.update(raw_line)
        chunk.append(_sentence_of(raw_line))
        if len(chunk) == plan.chunk_size:
            _check_chunk(input_path, plan, chunk_index, digest, partial_dir)
            yield chunk_index, chunk
            chunk, chunk_index, digest = [], chunk_index + 1, hashlib.sha256()
    if chunk:
        _check_chunk(input_path, plan, chunk_index, digest, partial_dir)
        yield chunk_index, chunk
    if chunk_index + (1 if chunk else 0) != plan.num_chunks:
        raise _input_changed(input_path, "its number of lines", partial_dir)


def _check_chunk(input_path: str, plan: _Plan, chunk_index: int, digest: "hashlib._Hash", partial_dir: str) -> None:
    if chunk_index >= len(plan.chunk_sha256) or digest.hexdigest() != plan.chunk_sha256[chunk_index]:
        first = chunk_index * plan.chunk_size + 1
        raise _input_changed(input_path, f"lines {first}-{first + plan.chunk_size - 1}", partial_dir)


def _input_changed(input_path: str, what: str, partial_dir: str) -> ConfigurationError:
    return ConfigurationError(
        f"{input_path} changed during the run ({what} differ from what was read at the start): "
        f"one output would mix two versions of the text. The finished chunks are kept in "
        f"{partial_dir}: restore the input and run the same command with --resume, or pass "
        "--overwrite to start over with the new text"
    )


def _batches(lengths: List[int], batch_size: Optional[int], stateful: bool, max_tokens: int) -> Iterator[List[int]]:
    """
    Positions within a chunk, grouped into batches: in stateful mode `batch_size` consecutive
    lines (0.9's batches, which the carried state depends on; the embedder reads a batch beyond
    the token budget in parts, `ElmoEmbedder.embed_batch_into`); in deterministic mode the lines
    sorted by length, at most `batch_size` of them (if given) and `max_tokens` token positions (with the
    sentence boundaries and padding), so many short lines fill a batch and a long one does not
    get the batch size of short ones. A line longer than `max_tokens` is a batch of its own
    (read in segments by the embedder).
    """
    if stateful:
        assert batch_size is not None, "stateful batches are batch_size consecutive lines"
        for start in range(0, len(lengths), batch_size):
            yield list(range(start, min(start + batch_size, len(lengths))))
        return
    groups, long_rows = rows_within_token_budget(lengths, max_tokens, batch_size)
    yield from groups
    yield from ([position] for position in long_rows)


def _embed_chunk(
    embedder: SentenceEmbedder,
    chunk_path: str,
    first_line: int,
    lines: List[str],
    batch_size: Optional[int],
    output_format: str,
) -> None:
    """
    Embeds one chunk into its own file, keyed by line index, batch by batch (so memory holds
    one batch of vectors, not a chunk), through a temporary file renamed into place.
    """
    stateful = embedder.stateful
    tokenized = [line.split() for line in lines]
    with atomic_output_path(chunk_path, suffix=".tmp") as temporary_path:
        with hdf5_for_writing(temporary_path) as handle:
            lengths = [len(tokens) for tokens in tokenized]
            for positions in _batches(lengths, batch_size, stateful, embedder.max_tokens_per_batch):
                writer = ChunkWriter(handle, [str(first_line + p) for p in positions], output_format,
                                     embedder.num_layers, embedder.output_dim)
                embedder.embed_batch_into([tokenized[p] for p in positions], writer)
            carried = embedder.batch_start_state.get()
            if stateful and carried is not None:
                with hdf5_errors_as_os_errors():
                    for name, tensor in zip(CARRIED_STATE, carried):
                        handle.create_dataset(name, data=tensor.cpu().numpy())


def _restore_carried_state(embedder: SentenceEmbedder, chunk_path: str) -> None:
    """The carried state as it was at the end of the chunk `chunk_path`."""
    carried: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    with h5py.File(chunk_path, "r") as handle:
        if "_carried_state_h" in handle:
            carried = tuple(  # type: ignore
                torch.from_numpy(handle[name][...]) for name in CARRIED_STATE
            )
    embedder.batch_start_state.set(carried)
