"""
Embedding a text file into HDF5 with the biLM: the engine of `allennlp elmo` and
`ElmoEmbedder.embed_file`.

Output (AllenNLP 0.9's format): one float32 dataset per input line, keyed by the line's index
(`"0"`, `"1"`, ...) or by the sentence (`use_sentence_keys`), of shape `(3, n_tokens, D)` for
`all`, `(n_tokens, D)` for `top` and `average`; plus `sentence_to_index`, a JSON string
`{sentence: "index"}`, unless `forget_sentences` or `use_sentence_keys`.

How the work is organised, and why:

- A first pass validates the whole input (UTF-8, blank lines, sentence keys) so that a bad
  line fails the run before any compute is spent, with its line number.
- The input is cut into chunks of consecutive lines. In deterministic mode each chunk's lines
  are sorted by length and batched, so there is almost no padding; results go back to their
  original keys. In stateful mode (0.9's behaviour) batches are consecutive lines in file
  order, `batch_size` each, so the carried state is what 0.9 computed.
- Each finished chunk is written to its own file in `OUTPUT.partial/` and renamed into place
  when complete (flushed to the disk first), so an interrupt (Ctrl-C, kill, disk full, power
  loss) loses at most the chunk in flight; `resume` checks the chunks on disk, embeds again any
  that is damaged, and skips the others (in stateful mode it restores the carried state saved
  with the chunk before each one it embeds). A resumed run must have the settings of the run
  it continues, the same model (its weights' fingerprint), precision and device type. At the
  end the chunks are merged into a temporary file next to OUTPUT, which is renamed to OUTPUT:
  a file under OUTPUT's name is always complete.
- One run at a time writes an OUTPUT: a second one is refused while the first holds
  `OUTPUT.lock`.
- Memory is bounded by one batch of vectors and one chunk of text, whatever the input size
  (except `sentence_to_index`, which holds every sentence by definition).
"""
import contextlib
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
import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.tqdm import Tqdm

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.modules.start_state import BatchStartState

logger = logging.getLogger(__name__)


class SentenceEmbedder(Protocol):
    """What the engine needs of an embedder (`ElmoEmbedder` is one)."""

    @property
    def stateful(self) -> bool:
        """Whether the LSTM state is carried from batch to batch (0.9's file-order batches)."""
        ...

    @property
    def batch_start_state(self) -> BatchStartState:
        """The carried state, saved with every chunk and restored on resume."""
        ...

    def embed_batch(self, batch: List[List[str]]) -> List[numpy.ndarray]:
        """One `(num_layers, len(sentence), dim)` array per sentence."""
        ...

    def identity(self) -> Dict[str, str]:
        """What a resumed run must share besides its settings: the model, how it computes."""
        ...


OUTPUT_FORMATS = ("all", "top", "average")
SENTENCE_TO_INDEX = "sentence_to_index"
# Lines per chunk: the unit of sorting, of memory, and of what an interrupt can lose.
DEFAULT_CHUNK_SIZE = 4096
# In deterministic mode a batch also stops at this many tokens per sentence slot, so that a
# batch of very long lines does not need batch_size times their memory.
TOKENS_PER_SENTENCE_SLOT = 50
_MAX_LINES_IN_MESSAGE = 10


@dataclass
class _RunSettings:
    """Everything a resumed run must share with the run it continues."""

    input_path: str
    input_size: int
    input_sha256: str
    output_format: str
    batch_size: int
    chunk_size: int
    stateful: bool
    use_sentence_keys: bool
    allow_empty_lines: bool
    model: str
    precision: str
    device: str


@dataclass
class _InputSummary:
    num_lines: int
    num_tokens: int
    sha256: str


def embed_file(
    embedder: SentenceEmbedder,
    input_path: str,
    output_path: str,
    output_format: str = "all",
    batch_size: int = 64,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    allow_empty_lines: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> None:
    """
    Embeds `input_path` (UTF-8, one whitespace-tokenized sentence per line) into
    `output_path`. See the module docstring for the format and the guarantees.

    # Parameters

    embedder : `SentenceEmbedder`
        The biLM (an `ElmoEmbedder`); its `stateful` flag selects 0.9's file-order batching.
    input_path : `str`
        The text file.
    output_path : `str`
        The HDF5 file; it appears only when complete.
    output_format : `str`, optional (default = `"all"`)
        `"all"`, `"top"` or `"average"`.
    batch_size : `int`, optional (default = `64`)
        Sentences per batch.
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
    """
    if output_format not in OUTPUT_FORMATS:
        raise ConfigurationError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    if batch_size < 1:
        raise ConfigurationError(f"batch_size must be positive, got {batch_size}")
    if chunk_size < 1:
        raise ConfigurationError(f"chunk_size must be positive (lines per chunk), got {chunk_size}")
    _check_paths(input_path, output_path, overwrite)
    with _sole_writer(output_path):
        _embed_file(
            embedder, input_path, output_path, output_format, batch_size, forget_sentences,
            use_sentence_keys, allow_empty_lines, resume, overwrite, chunk_size,
        )


def _check_paths(input_path: str, output_path: str, overwrite: bool) -> None:
    """Everything about the paths that can be known before any work."""
    if not os.path.isfile(input_path):
        raise ConfigurationError(f"Input file {input_path} does not exist")
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


def _embed_file(
    embedder: SentenceEmbedder,
    input_path: str,
    output_path: str,
    output_format: str,
    batch_size: int,
    forget_sentences: bool,
    use_sentence_keys: bool,
    allow_empty_lines: bool,
    resume: bool,
    overwrite: bool,
    chunk_size: int,
) -> None:
    stateful = embedder.stateful
    if stateful:
        chunk_size = -(-chunk_size // batch_size) * batch_size
    partial_dir = output_path + ".partial"
    if os.path.exists(partial_dir) and not resume:
        if not overwrite:
            raise ConfigurationError(
                f"{partial_dir} holds an interrupted run; pass --resume to continue it or "
                f"--overwrite to start over"
            )
        shutil.rmtree(partial_dir)

    summary = _validate_input(input_path, use_sentence_keys, forget_sentences, allow_empty_lines)
    settings = _RunSettings(
        input_path=os.path.abspath(input_path),
        input_size=os.path.getsize(input_path),
        input_sha256=summary.sha256,
        output_format=output_format,
        batch_size=batch_size,
        chunk_size=chunk_size,
        stateful=stateful,
        use_sentence_keys=use_sentence_keys,
        allow_empty_lines=allow_empty_lines,
        **embedder.identity(),
    )
    done_chunks = _prepare_partial_dir(partial_dir, settings, resume)
    num_chunks = -(-summary.num_lines // chunk_size)
    done_chunks = _intact_chunks(partial_dir, done_chunks, chunk_size, summary.num_lines)

    embedder.batch_start_state.reset()
    # Stateful: whether the carried state is the one at the end of the previous chunk.
    state_follows_previous_chunk = True
    progress = Tqdm.tqdm(total=summary.num_lines, unit="sentences", desc="embedding")
    tokens_done = 0
    start_time = time.monotonic()
    for chunk_index, lines in _read_chunks(input_path, chunk_size):
        if chunk_index in done_chunks:
            progress.update(len(lines))
            state_follows_previous_chunk = False
            continue
        if stateful and not state_follows_previous_chunk:
            _restore_carried_state(embedder, os.path.join(partial_dir, _chunk_name(chunk_index - 1)))
            state_follows_previous_chunk = True
        chunk_path = os.path.join(partial_dir, _chunk_name(chunk_index))
        try:
            _embed_chunk(embedder, chunk_path, chunk_index * chunk_size, lines, batch_size, output_format)
        except OSError as error:
            raise OSError(
                error.errno,
                f"Cannot write {chunk_path} ({error}); the chunks finished before it are kept in "
                f"{partial_dir}: free the space (or fix the problem) and run the same command with "
                "--resume",
            ) from error
        tokens_done += sum(len(line.split()) for line in lines)
        progress.update(len(lines))
        progress.set_postfix(tokens_per_s=f"{tokens_done / max(time.monotonic() - start_time, 1e-9):.0f}")
    progress.close()
    try:
        _merge(partial_dir, output_path, num_chunks, input_path, use_sentence_keys, forget_sentences)
    except OSError as error:
        raise OSError(
            error.errno,
            f"Cannot write {output_path} ({error}); nothing was written under that name and the "
            f"finished chunks are kept in {partial_dir}: free the space (or fix the problem) and "
            "run the same command with --resume",
        ) from error
    shutil.rmtree(partial_dir)
    logger.info("Wrote %d sentences (%d tokens) to %s", summary.num_lines, summary.num_tokens, output_path)


def _sentence_of(raw_line: bytes) -> str:
    # split() drops "\r" of "\r\n" line ends and any run of spaces or tabs.
    return " ".join(raw_line.decode("utf-8").split())


def _iterate_lines(input_path: str) -> Iterator[Tuple[int, bytes]]:
    with open(input_path, "rb") as handle:
        for index, raw_line in enumerate(handle):
            yield index, raw_line


def _format_lines(line_numbers: List[int]) -> str:
    shown = ", ".join(str(n + 1) for n in line_numbers[:_MAX_LINES_IN_MESSAGE])
    more = len(line_numbers) - _MAX_LINES_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def _validate_input(
    input_path: str, use_sentence_keys: bool, forget_sentences: bool, allow_empty_lines: bool
) -> _InputSummary:
    """
    One streaming pass: every problem is reported with its (1-based) line number; the file's
    digest (which identifies the input of a resumed run) is taken in the same read.
    """
    empty_lines: List[int] = []
    bad_keys: List[int] = []
    num_lines = num_tokens = 0
    digest = hashlib.sha256()
    for index, raw_line in _iterate_lines(input_path):
        digest.update(raw_line)
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
    return _InputSummary(num_lines=num_lines, num_tokens=num_tokens, sha256=digest.hexdigest())


def _chunk_name(chunk_index: int) -> str:
    return f"chunk_{chunk_index:07d}.hdf5"


def _prepare_partial_dir(partial_dir: str, settings: _RunSettings, resume: bool) -> Set[int]:
    manifest_path = os.path.join(partial_dir, "settings.json")
    if resume and os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            earlier = json.load(handle)
        if earlier != asdict(settings):
            differing = sorted(k for k in earlier if earlier.get(k) != asdict(settings).get(k))
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
        path = os.path.join(partial_dir, _chunk_name(chunk_index))
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


def _read_chunks(input_path: str, chunk_size: int) -> Iterator[Tuple[int, List[str]]]:
    chunk: List[str] = []
    chunk_index = 0
    for _, raw_line in _iterate_lines(input_path):
        chunk.append(_sentence_of(raw_line))
        if len(chunk) == chunk_size:
            yield chunk_index, chunk
            chunk, chunk_index = [], chunk_index + 1
    if chunk:
        yield chunk_index, chunk


def _batches(lengths: List[int], batch_size: int, stateful: bool) -> Iterator[List[int]]:
    """Positions within a chunk, grouped into batches."""
    if stateful:
        for start in range(0, len(lengths), batch_size):
            yield list(range(start, min(start + batch_size, len(lengths))))
        return
    order = sorted(range(len(lengths)), key=lambda position: lengths[position])
    token_budget = batch_size * TOKENS_PER_SENTENCE_SLOT
    batch: List[int] = []
    for position in order:
        # Sorted ascending: the newest sentence is the longest, so it sets the padded size.
        if batch and (len(batch) == batch_size or (len(batch) + 1) * lengths[position] > token_budget):
            yield batch
            batch = []
        batch.append(position)
    if batch:
        yield batch


def _reduce(embedding: numpy.ndarray, output_format: str) -> numpy.ndarray:
    if output_format == "top":
        return embedding[-1]
    if output_format == "average":
        return numpy.average(embedding, axis=0)
    return embedding


def _embed_chunk(
    embedder: SentenceEmbedder,
    chunk_path: str,
    first_line: int,
    lines: List[str],
    batch_size: int,
    output_format: str,
) -> None:
    """
    Embeds one chunk into its own file, keyed by line index, batch by batch (so memory holds
    one batch of vectors, not a chunk), through a temporary file renamed into place.
    """
    stateful = embedder.stateful
    tokenized = [line.split() for line in lines]
    with atomic_output_path(chunk_path, suffix=".tmp") as temporary_path:
        with _hdf5_for_writing(temporary_path) as handle:
            for positions in _batches([len(tokens) for tokens in tokenized], batch_size, stateful):
                embeddings = embedder.embed_batch([tokenized[p] for p in positions])
                for position, embedding in zip(positions, embeddings):
                    with _hdf5_errors_as_os_errors():
                        handle.create_dataset(
                            str(first_line + position),
                            data=_reduce(embedding, output_format).astype(numpy.float32),
                        )
            carried = embedder.batch_start_state.get()
            if stateful and carried is not None:
                with _hdf5_errors_as_os_errors():
                    handle.create_dataset("_carried_state_h", data=carried[0].cpu().numpy())
                    handle.create_dataset("_carried_state_c", data=carried[1].cpu().numpy())


@contextlib.contextmanager
def _hdf5_errors_as_os_errors() -> Iterator[None]:
    # HDF5 reports a failed write (a full disk, a file-size limit) as OSError or RuntimeError,
    # with a message over several lines: one OSError with its errno and a one-line message.
    try:
        yield
    except (OSError, RuntimeError) as error:
        raise OSError(getattr(error, "errno", None), " ".join(str(error).split())) from error


@contextlib.contextmanager
def _hdf5_for_writing(path: str) -> Iterator[h5py.File]:
    """An HDF5 file open for writing whose write errors are `OSError`s (see above); when the
    body fails, closing it cannot replace that error (the file is discarded anyway)."""
    with _hdf5_errors_as_os_errors():
        handle = h5py.File(path, "w")
    try:
        yield handle
    except BaseException:
        with contextlib.suppress(Exception):
            handle.close()
        raise
    with _hdf5_errors_as_os_errors():
        handle.close()


def _restore_carried_state(embedder: SentenceEmbedder, chunk_path: str) -> None:
    """The carried state as it was at the end of the chunk `chunk_path`."""
    carried: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    with h5py.File(chunk_path, "r") as handle:
        if "_carried_state_h" in handle:
            carried = tuple(  # type: ignore
                torch.from_numpy(handle[name][...]) for name in ("_carried_state_h", "_carried_state_c")
            )
    embedder.batch_start_state.set(carried)


def _merge(
    partial_dir: str,
    output_path: str,
    num_chunks: int,
    input_path: str,
    use_sentence_keys: bool,
    forget_sentences: bool,
) -> None:
    """Copies the chunks into OUTPUT under their final keys; OUTPUT appears only when complete."""
    with atomic_output_path(output_path, suffix=".hdf5.merging") as temporary_path:
        sentence_to_index: Dict[str, str] = {}
        duplicates = 0
        line_iterator = _iterate_lines(input_path)
        with _hdf5_for_writing(temporary_path) as output:
            for chunk_index in range(num_chunks):
                with h5py.File(os.path.join(partial_dir, _chunk_name(chunk_index)), "r") as chunk:
                    indices = sorted(int(name) for name in chunk if not name.startswith("_"))
                    for index in indices:
                        _, raw_line = next(line_iterator)
                        sentence = _sentence_of(raw_line)
                        if use_sentence_keys:
                            # Sentence keys are the mapping already: 0.9 wrote none, and
                            # clients list the file's keys as its sentences.
                            if sentence in output:
                                duplicates += 1
                                continue
                            key = sentence
                        else:
                            key = str(index)
                            if not forget_sentences:
                                sentence_to_index.setdefault(sentence, key)
                        with _hdf5_errors_as_os_errors():
                            chunk.copy(chunk[str(index)], output, name=key)
            if not forget_sentences and not use_sentence_keys:
                # 0.9's layout: a (1,) string dataset, read as json.loads(file[...][0]).
                with _hdf5_errors_as_os_errors():
                    mapping = output.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.string_dtype())
                    mapping[0] = json.dumps(sentence_to_index)
        if duplicates:
            logger.warning(
                "%d repeated sentences were stored once each under their sentence key", duplicates
            )
