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
  Carried state runs through the file in order: stateful mode takes one process. On GPUs each
  process computes on its own (`workers.device_of_this_process`); several may share one GPU.
- One run at a time writes an OUTPUT: a second one is refused while the first holds
  `OUTPUT.lock`.
"""
import contextlib
import functools
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.tqdm import Tqdm

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.inference import workers
from elmo_plugin.inference.batching import rows_within_token_budget
from elmo_plugin.inference.embed_file_options import EmbedFileOptions
from elmo_plugin.inference.hdf5_output import (
    CARRIED_STATE,
    ChunkWriter,
    chunk_name,
    hdf5_errors_as_os_errors,
    hdf5_for_writing,
    leftover_merges,
    merge_chunks,
)
from elmo_plugin.inference.input_text import (
    input_changed,
    not_a_regular_file,
    read_chunks,
    validate_input,
)
from elmo_plugin.inference.resume import (
    RunSettings,
    intact_chunks,
    prepare_partial_dir,
    restore_carried_state,
    sole_writer,
)
from elmo_plugin.inference.sentence_embedder import SentenceEmbedder

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Request:
    """What was asked, as every worker process receives it."""

    input_path: str
    output_path: str
    options: EmbedFileOptions

    @property
    def partial_dir(self) -> str:
        return self.output_path + ".partial"


@dataclass(frozen=True)
class _Plan:
    """What the first process found and prepared, for all of them."""

    batch_size: Optional[int]  # None: deterministic batches by the token budget alone
    chunk_size: int
    num_chunks: int
    done_chunks: frozenset
    num_lines: int
    num_tokens: int
    identity: Tuple[Tuple[str, str], ...]
    chunk_sha256: Tuple[str, ...]
    input_size: int


def embed_file(
    embedder: SentenceEmbedder, input_path: str, output_path: str, options: EmbedFileOptions = EmbedFileOptions()
) -> None:
    """
    Embeds `input_path` (UTF-8, one whitespace-tokenized sentence per line) into
    `output_path` as `options` say. See the module docstring for the format and the guarantees.

    # Parameters

    embedder : `SentenceEmbedder`
        The biLM (an `ElmoEmbedder`); its `stateful` flag selects 0.9's file-order batching,
        its `max_tokens_per_batch` the batches' token budget.
    input_path : `str`
        The text file.
    output_path : `str`
        The HDF5 file; it appears only when complete.
    options : `EmbedFileOptions`, optional
        Everything else (`embed_file_options`).
    """
    request = _Request(input_path, output_path, options)
    options.output_vectors().check(embedder.num_layers)
    _check_paths(input_path, output_path, options.overwrite)
    if options.num_workers == 1:
        with workers.process_group_of_launcher():
            _run(request, embedder)
        return
    if workers.rank_and_world()[1] > 1:
        raise ConfigurationError(
            f"num_workers is {options.num_workers} in a run that torch.distributed already started "
            "(torchrun): its processes share the work; leave num_workers at 1."
        )
    _check_can_share_work(embedder, options.num_workers)
    device = embedder.device
    workers.warn_if_gpus_shared(device, options.num_workers)
    run = functools.partial(_run, request, expected_identity=embedder.identity(), device=device)
    # GPU tensors would reach the workers through CUDA IPC, which sandboxes and some drivers
    # refuse: the copies travel through host memory, and each worker moves its own to its GPU.
    embedder.move_to(torch.device("cpu"))
    try:
        workers.spawn_workers(run, embedder, options.num_workers, output_path)
    finally:
        embedder.move_to(device)


def _check_can_share_work(embedder: SentenceEmbedder, world: int) -> None:
    if embedder.stateful:
        raise ConfigurationError(
            f"{world} worker processes in stateful mode: the carried state runs through the file "
            "in order, so one process must read it all. Use deterministic mode (--deterministic; "
            "ElmoEmbedder(stateful=False)) to share the work."
        )


def _check_paths(input_path: str, output_path: str, overwrite: bool) -> None:
    """Everything about the paths that can be known before any work."""
    if not os.path.isfile(input_path):
        raise ConfigurationError(not_a_regular_file(input_path))
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


def _run(
    request: _Request,
    embedder: SentenceEmbedder,
    expected_identity: Optional[Dict[str, str]] = None,
    device: Optional[torch.device] = None,
) -> None:
    """One process's part of a run (the whole run in a single process). `expected_identity`
    and `device`: those of the embedder a worker's copy was made from."""
    rank, world = workers.rank_and_world()
    if world > 1:
        _check_can_share_work(embedder, world)
        own_device = workers.device_of_this_process(device or embedder.device)
        if own_device != embedder.device:
            embedder.move_to(own_device)
    identity = embedder.identity()  # a digest of every weight: computed once per process
    if expected_identity is not None and identity != expected_identity:
        raise ConfigurationError(
            f"The embedder's copy in worker {rank} differs from the embedder given "
            f"({_differences(expected_identity, identity)}): it would compute other "
            "vectors than the one process would. Embed with one process (num_workers=1)."
        )
    with contextlib.ExitStack() as held:

        def prepare() -> _Plan:
            # The first process holds the lock for the run; if it cannot, all learn why.
            held.enter_context(sole_writer(request.output_path))
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
    options = request.options
    batch_size, chunk_size = options.batch_size_for(embedder.stateful), options.chunk_size
    if embedder.stateful:  # whole batches per chunk: the carried state runs through them
        chunk_size = -(-chunk_size // batch_size) * batch_size
    partial_dir = request.partial_dir
    for leftover in leftover_merges(request.output_path):  # of a killed run: we hold the lock
        logger.info("Removing %s, left by a run killed while merging", leftover)
        os.remove(leftover)
    if os.path.exists(partial_dir) and not options.resume:
        if not options.overwrite:
            raise ConfigurationError(
                f"{partial_dir} holds an interrupted run; pass --resume to continue it or "
                f"--overwrite to start over"
            )
        shutil.rmtree(partial_dir)
    input_size = os.path.getsize(request.input_path)
    summary = validate_input(request.input_path, options.use_sentence_keys, options.forget_sentences,
                             options.allow_empty_lines, chunk_size)
    settings = RunSettings(
        input_path=os.path.abspath(request.input_path),
        input_size=input_size,
        input_sha256=summary.sha256,
        output_format=options.output_format,
        batch_size=batch_size,
        max_tokens_per_batch=embedder.max_tokens_per_batch,
        chunk_size=chunk_size,
        stateful=embedder.stateful,
        use_sentence_keys=options.use_sentence_keys,
        allow_empty_lines=options.allow_empty_lines,
        shard_size=options.shard_size,
        dtype=options.dtype,
        compression=options.compression,
        mix=None if options.mix is None else [*options.mix.weights, options.mix.gamma],
        sentence_vectors=options.sentence_vectors,
        **identity,
    )
    done_chunks = prepare_partial_dir(partial_dir, settings, options.resume)
    done_chunks = intact_chunks(partial_dir, done_chunks, chunk_size, summary.num_lines)
    return _Plan(
        batch_size=batch_size,
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
    for chunk_index, lines in read_chunks(request.input_path, plan.chunk_size, plan.chunk_sha256, request.partial_dir):
        if chunk_index % world != rank:
            continue
        if chunk_index in plan.done_chunks:
            progress.update(len(lines))
            state_follows_previous_chunk = False
            continue
        if embedder.stateful and not state_follows_previous_chunk:
            restore_carried_state(embedder.batch_start_state, os.path.join(request.partial_dir, chunk_name(chunk_index - 1)))
            state_follows_previous_chunk = True
        chunk_path = os.path.join(request.partial_dir, chunk_name(chunk_index))
        try:
            _embed_chunk(embedder, chunk_path, chunk_index * plan.chunk_size, lines, plan.batch_size,
                         request.options)
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
        raise input_changed(request.input_path, "its size", request.partial_dir)
    chunks = read_chunks(request.input_path, plan.chunk_size, plan.chunk_sha256, request.partial_dir)
    sentences = (line for _, lines in chunks for line in lines)
    try:
        written = merge_chunks(request.partial_dir, request.output_path, plan.num_chunks, sentences,
                               request.options.use_sentence_keys, request.options.forget_sentences,
                               request.options.shard_size)
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
    options: EmbedFileOptions,
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
                writer = ChunkWriter(handle, [str(first_line + p) for p in positions], options.output_vectors(),
                                     embedder.num_layers, embedder.output_dim, options.dtype, options.hdf5_filter())
                embedder.embed_batch_into([tokenized[p] for p in positions], writer)
            carried = embedder.batch_start_state.get()
            if stateful and carried is not None:
                with hdf5_errors_as_os_errors():
                    for name, tensor in zip(CARRIED_STATE, carried):
                        handle.create_dataset(name, data=tensor.cpu().numpy())


