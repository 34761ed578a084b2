"""
The HDF5 side of the file engine (`embed_file`): writing a chunk's vectors, and merging the
finished chunks into the output, one file or several.

Output (AllenNLP 0.9's format): one float32 dataset per input line, keyed by the line's index
(`"0"`, `"1"`, ...) or by the sentence, of shape `(3, n_tokens, D)` for `all` and
`(n_tokens, D)` for `top` and `average`; plus `sentence_to_index`, a JSON string
`{sentence: "index"}`. A sharded output (`shard_size`) is that file with external links in
place of the datasets, each to a shard `OUTPUT_STEM-NNNNN.hdf5` beside it:
`h5py.File(OUTPUT)["123"]` reads through the link as if the data were there. Every file is
written under a temporary name and renamed when complete, the shards before the file that
names them.
"""
import contextlib
import json
import logging
import math
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

import h5py
import numpy
import torch

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.inference.output_vectors import OutputVectors
from elmo_plugin.modules.segmented_reading import direction_columns

logger = logging.getLogger(__name__)

SENTENCE_TO_INDEX = "sentence_to_index"
# Attribute of a sharded output: the shards' file names, in order.
SHARDS_ATTRIBUTE = "shards"
CARRIED_STATE = ("_carried_state_h", "_carried_state_c")
# Datasets above this size are copied into the output a slice at a time.
_COPY_BLOCK_BYTES = 16 * 2**20


def chunk_name(chunk_index: int) -> str:
    return f"chunk_{chunk_index:07d}.hdf5"


@contextlib.contextmanager
def hdf5_errors_as_os_errors() -> Iterator[None]:
    # HDF5 reports a failed write (a full disk, a file-size limit) as OSError or RuntimeError,
    # with a message over several lines: one OSError with its errno and a one-line message.
    try:
        yield
    except (OSError, RuntimeError) as error:
        raise OSError(getattr(error, "errno", None), " ".join(str(error).split())) from error


@contextlib.contextmanager
def hdf5_for_writing(path: str) -> Iterator[h5py.File]:
    """An HDF5 file open for writing whose write errors are `OSError`s (see above); when the
    body fails, closing it cannot replace that error (the file is discarded anyway)."""
    with hdf5_errors_as_os_errors():
        handle = h5py.File(path, "w")
    try:
        yield handle
    except BaseException:
        with contextlib.suppress(Exception):
            handle.close()
        raise
    with hdf5_errors_as_os_errors():
        handle.close()


# What h5py's `create_dataset` passes HDF5 for an unfiltered dataset (its default
# `track_times=False`), made once for every chunk writer.
_PLAIN_DATASET_CREATION = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
_PLAIN_DATASET_CREATION.set_obj_track_times(False)


class ChunkWriter:
    """A batch's vectors into a chunk file, as `output` says (`OutputVectors`); a sentence that
    comes in segments (`ElmoEmbedder.embed_batch_into`) is written segment by segment into its
    dataset (its sentence vector rewritten from the running sum after each segment)."""

    def __init__(
        self, handle: h5py.File, keys: List[str], output: OutputVectors, num_layers: int, dim: int,
        dtype: str = "float32", hdf5_filter: Optional[Dict[str, Any]] = None,
    ) -> None:
        self._handle, self._keys, self._output = handle, keys, output
        self._num_layers, self._dim = num_layers, dim
        self._dtype, self._filter = numpy.dtype(dtype), hdf5_filter or {}
        # Sentence vectors of segmented rows: (float64 sum over the tokens so far, tokens).
        self._sums: Dict[int, Tuple[numpy.ndarray, int]] = {}
        self._type_id = h5py.h5t.py_create(self._dtype, logical=True)  # as h5py makes it

    def _filter_for(self, shape: Tuple[int, ...]) -> Dict[str, Any]:
        # HDF5 filters need chunked storage, which an empty dataset (a blank line) cannot have.
        return self._filter if all(shape) else {}

    def whole(self, row: int, embedding: numpy.ndarray) -> None:
        data = numpy.ascontiguousarray(self._output.of_sentence(embedding), dtype=self._dtype)
        with hdf5_errors_as_os_errors():
            hdf5_filter = self._filter_for(data.shape)
            if hdf5_filter:
                self._handle.create_dataset(self._keys[row], data=data, **hdf5_filter)
                return
            # One dataset per line: through h5py's low-level calls, the same dataset as its
            # `create_dataset` makes, for a fraction of the time its objects take.
            dataset = h5py.h5d.create(
                self._handle.id, self._keys[row].encode("utf-8"), self._type_id,
                h5py.h5s.create_simple(data.shape), dcpl=_PLAIN_DATASET_CREATION,
            )
            if data.size:
                dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, data)

    def start_segments(self, row: int, num_tokens: int) -> None:
        shape = self._output.shape(self._num_layers, num_tokens, self._dim)
        if self._output.sentence_vectors:
            self._sums[row] = (numpy.zeros(shape, dtype=numpy.float64), num_tokens)
        with hdf5_errors_as_os_errors():
            self._handle.create_dataset(self._keys[row], shape=shape, dtype=self._dtype, **self._filter_for(shape))

    def segment(self, row: int, direction: str, start: int, stop: int, layers: List[torch.Tensor]) -> None:
        columns = direction_columns(direction, self._dim)
        # (layers, tokens, half): the output's layers of one direction's half.
        reduced = self._output.layers(numpy.stack([layer.cpu().numpy() for layer in layers]))
        dataset = self._handle[self._keys[row]]
        with hdf5_errors_as_os_errors():
            if self._output.sentence_vectors:
                total, num_tokens = self._sums[row]
                total[..., columns] += self._output.token_sum(reduced)
                dataset[...] = self._output.sentence(total, num_tokens)
            elif self._output.output_format == "all":
                dataset[:, start:stop, columns] = reduced
            else:
                dataset[start:stop, columns] = reduced


def shard_path(output_path: str, shard: int) -> str:
    stem = output_path[: -len(".hdf5")] if output_path.endswith(".hdf5") else output_path
    return f"{stem}-{shard:05d}.hdf5"


def merge_chunks(
    partial_dir: str,
    output_path: str,
    num_chunks: int,
    sentences: Iterator[str],
    use_sentence_keys: bool,
    forget_sentences: bool,
    shard_size: Optional[int] = None,
) -> List[str]:
    """
    Copies the chunks (`chunk_name(i)` in `partial_dir`, i < `num_chunks`) into OUTPUT under
    their final keys (`sentences`: every line's sentence, in order), into shards of about
    `shard_size` bytes if given. Returns the files written, OUTPUT last; OUTPUT appears only
    when it and its shards are complete.
    """
    earlier_shards = _shards_of(output_path)
    shards: List[str] = []
    sentence_to_index: Dict[str, str] = {}
    duplicates = 0
    with atomic_output_path(output_path, suffix=".hdf5.merging") as temporary_path:
        with hdf5_for_writing(temporary_path) as output, contextlib.ExitStack() as shard_stack:
            target, target_bytes = output, 0
            for chunk_index in range(num_chunks):
                with h5py.File(os.path.join(partial_dir, chunk_name(chunk_index)), "r") as chunk:
                    for index in sorted(int(name) for name in chunk if not name.startswith("_")):
                        sentence = next(sentences)
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
                        if shard_size is not None and (target is output or target_bytes >= shard_size):
                            shard_stack.close()
                            shards.append(shard_path(output_path, len(shards)))
                            target = shard_stack.enter_context(_complete_file(shards[-1]))
                            target_bytes = 0
                        with hdf5_errors_as_os_errors():
                            target_bytes += _copy_dataset(chunk, str(index), target, key)
                            if target is not output:
                                output[key] = h5py.ExternalLink(os.path.basename(shards[-1]), key)
            with hdf5_errors_as_os_errors():
                if not forget_sentences and not use_sentence_keys:
                    # 0.9's layout: a (1,) string dataset, read as json.loads(file[...][0]).
                    mapping = output.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.string_dtype())
                    mapping[0] = json.dumps(sentence_to_index)
                if shard_size is not None:
                    output.attrs[SHARDS_ATTRIBUTE] = json.dumps([os.path.basename(path) for path in shards])
    for stale in sorted(set(earlier_shards) - {os.path.abspath(path) for path in shards}):
        with contextlib.suppress(OSError):
            os.remove(stale)
    if duplicates:
        logger.warning("%d repeated sentences were stored once each under their sentence key", duplicates)
    return shards + [output_path]


# Links as h5py's high-level calls create them (intermediate groups as needed; the names' bytes
# are UTF-8 under HDF5's default ASCII flag, as h5py writes them), so that the output is the
# same file, byte for byte, as when the merge copied through h5py's objects.
_LINK_NAMES = h5py.h5p.create(h5py.h5p.LINK_CREATE)
_LINK_NAMES.set_create_intermediate_group(True)


def _copy_dataset(chunk: h5py.File, name: str, target: h5py.Group, key: str) -> int:
    """Copies `chunk[name]` into `target[key]` and returns its size in bytes: a large one slice
    by slice along its tokens (HDF5's own copy reads a dataset whole, and one sentence's vectors
    may be gigabytes), the others by HDF5's copy through h5py's low-level calls (a few times
    faster per dataset than its high-level objects, which matters at one dataset per line)."""
    dataset_id = h5py.h5d.open(chunk.id, name.encode("utf-8"))
    nbytes = math.prod(dataset_id.shape) * dataset_id.get_type().get_size()
    if nbytes <= _COPY_BLOCK_BYTES:
        h5py.h5o.copy(chunk.id, name.encode("utf-8"), target.id, key.encode("utf-8"), lcpl=_LINK_NAMES)
        return nbytes
    source = h5py.Dataset(dataset_id)
    filters = {"compression": source.compression, "compression_opts": source.compression_opts} if source.compression else {}
    copy = target.create_dataset(key, shape=source.shape, dtype=source.dtype, chunks=source.chunks, **filters)
    token_axis = source.ndim - 2  # (layers, tokens, dim) or (tokens, dim)
    tokens_per_block = max(1, _COPY_BLOCK_BYTES * source.shape[token_axis] // source.nbytes)
    for start in range(0, source.shape[token_axis], tokens_per_block):
        block = (slice(None),) * token_axis + (slice(start, start + tokens_per_block),)
        copy[block] = source[block]
    return nbytes


@contextlib.contextmanager
def _complete_file(path: str) -> Iterator[h5py.File]:
    """An HDF5 file that appears under `path` once written and closed."""
    with atomic_output_path(path, suffix=".hdf5.merging") as temporary_path:
        with hdf5_for_writing(temporary_path) as handle:
            yield handle


def leftover_merges(output_path: str) -> List[str]:
    """Temporary files of merges into OUTPUT or its shards whose run was killed (what
    `atomic_output_path` writes before its rename: `.NAME.XXXXXXXX.hdf5.merging`)."""
    directory = os.path.dirname(os.path.abspath(output_path))
    shard_stem = os.path.basename(shard_path(output_path, 0))[: -len("00000.hdf5")]
    pattern = re.compile(rf"\.({re.escape(os.path.basename(output_path))}|{re.escape(shard_stem)}\d{{5}}\.hdf5)\..+\.hdf5\.merging")
    return sorted(os.path.join(directory, name) for name in os.listdir(directory) if pattern.fullmatch(name))


def _shards_of(output_path: str) -> List[str]:
    """The shards an existing OUTPUT names (to remove those a new run does not write again)."""
    if not os.path.isfile(output_path):
        return []
    try:
        with h5py.File(output_path, "r") as handle:
            names = json.loads(handle.attrs.get(SHARDS_ATTRIBUTE, "[]"))
    except (OSError, ValueError):
        return []
    directory = os.path.dirname(os.path.abspath(output_path))
    return [os.path.join(directory, name) for name in names]
