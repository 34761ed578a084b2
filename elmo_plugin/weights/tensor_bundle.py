"""
TensorFlow's checkpoint format (the "tensor bundle" of `tf.train.Saver` and of a SavedModel's
`variables/`), read without TensorFlow.

A checkpoint `PREFIX` is

- `PREFIX.index`: a LevelDB-style table (sorted key/value blocks, an index block, a 48-byte
  footer ending in a magic number), each block followed by its type and masked crc32c. Its
  values are protocol buffers: under the empty key a `BundleHeaderProto` (number of shards,
  endianness), under each tensor's name a `BundleEntryProto` (dtype, shape, shard, offset,
  size, masked crc32c of the bytes);
- `PREFIX.data-SSSSS-of-NNNNN`: the shards, raw tensor bytes in the header's byte order.

Both formats have been stable since TensorFlow 1.0; only what a biLM needs is read (numeric
dense tensors), and everything read is checked: block and tensor checksums, shapes against
byte sizes, shards and offsets against the files.
"""
import os
import struct
from dataclasses import dataclass
from typing import Dict, Iterator, List, Tuple

import google_crc32c
import numpy
from allennlp.common.checks import ConfigurationError

INDEX_SUFFIX = ".index"
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER_SIZE = 5
_NO_COMPRESSION = 0
_CRC_MASK_DELTA = 0xA282EAD8
_LITTLE_ENDIAN = 0

# TensorFlow's DataType enum -> numpy dtype (little-endian), for the dtypes read here.
_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 9: "<i8", 19: "<f2", 14: "bfloat16"}
_DTYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 7: "string", 9: "int64", 10: "bool",
                14: "bfloat16", 19: "float16"}


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor of a checkpoint is, and what it is."""

    name: str
    dtype: int
    shape: Tuple[int, ...]
    shard: int
    offset: int
    size: int
    masked_crc32c: int
    sliced: bool

    @property
    def dtype_name(self) -> str:
        return _DTYPE_NAMES.get(self.dtype, f"DataType {self.dtype}")


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


class TensorBundle:
    """
    The checkpoint at `prefix` (what `tf.train.Saver.save` returned: the paths without
    `.index`). `source` names it in errors. Reading the index checks its blocks and every
    entry's shard, offset and size; `tensor` checks the bytes' crc32c.
    """

    def __init__(self, prefix: str, source: str) -> None:
        self.prefix = prefix
        self.source = source
        index_path = prefix + INDEX_SUFFIX
        if not os.path.isfile(index_path):
            raise ConfigurationError(f"{source}: the checkpoint index {index_path} does not exist.")
        with open(index_path, "rb") as handle:
            table = handle.read()
        records = dict(_table_records(table, index_path))
        if b"" not in records:
            raise ConfigurationError(f"{index_path} has no bundle header: it is not a TensorFlow checkpoint index.")
        self.num_shards, endianness = _header(records.pop(b""), index_path)
        if endianness != _LITTLE_ENDIAN:
            raise ConfigurationError(f"{index_path}: big-endian checkpoints are not supported.")
        self._shard_sizes: Dict[int, int] = {}
        for shard in range(self.num_shards):
            path = data_file(prefix, shard, self.num_shards)
            if not os.path.isfile(path):
                raise ConfigurationError(
                    f"{source}: the checkpoint's data shard {path} is missing (the index names "
                    f"{self.num_shards} shard(s): {os.path.basename(data_file(prefix, 0, self.num_shards))} ...)."
                )
            self._shard_sizes[shard] = os.path.getsize(path)
        self.entries: Dict[str, BundleEntry] = {}
        for key, value in records.items():
            name = key.decode("utf-8", "replace")
            entry = _entry(name, value, index_path)
            self._check_location(entry)
            self.entries[name] = entry

    def _check_location(self, entry: BundleEntry) -> None:
        if entry.sliced:
            return  # partitioned variables: refused if asked for, see `tensor`
        if not 0 <= entry.shard < self.num_shards:
            raise ConfigurationError(
                f"{self.prefix}{INDEX_SUFFIX}: tensor '{entry.name}' is in shard {entry.shard}, "
                f"but the checkpoint has {self.num_shards}."
            )
        end = entry.offset + entry.size
        shard_size = self._shard_sizes[entry.shard]
        if entry.offset < 0 or end > shard_size:
            raise ConfigurationError(
                f"{self.source}: tensor '{entry.name}' lies at bytes {entry.offset}-{end} of "
                f"{data_file(self.prefix, entry.shard, self.num_shards)}, which has {shard_size} "
                "(a truncated shard?)."
            )

    def names(self) -> List[str]:
        return sorted(self.entries)

    def tensor(self, name: str) -> numpy.ndarray:
        """Tensor `name` as a numpy array (bfloat16 and float16 widened to float32)."""
        entry = self.entries[name]
        if entry.sliced:
            raise ConfigurationError(
                f"{self.source}: tensor '{name}' is saved in slices (a partitioned variable); "
                "such checkpoints are not supported."
            )
        if entry.dtype not in _DTYPES:
            raise ConfigurationError(
                f"{self.source}: tensor '{name}' is {entry.dtype_name}; only numeric tensors "
                f"({', '.join(sorted(_DTYPE_NAMES[d] for d in _DTYPES))}) are read."
            )
        path = data_file(self.prefix, entry.shard, self.num_shards)
        with open(path, "rb") as handle:
            handle.seek(entry.offset)
            content = handle.read(entry.size)
        if len(content) != entry.size:
            raise ConfigurationError(f"{self.source}: {path} ends inside tensor '{name}'.")
        if _masked(google_crc32c.value(content)) != entry.masked_crc32c:
            raise ConfigurationError(
                f"{self.source}: tensor '{name}' fails its crc32c check in {path} (the shard is "
                "damaged, or is not the one this index was written with)."
            )
        dtype = _DTYPES[entry.dtype]
        width = 2 if dtype == "bfloat16" else numpy.dtype(dtype).itemsize
        count = int(numpy.prod(entry.shape, dtype=numpy.int64))
        if count * width != entry.size:
            raise ConfigurationError(
                f"{self.source}: tensor '{name}' has shape {entry.shape} of {entry.dtype_name} "
                f"({count * width} bytes) but {entry.size} bytes in the checkpoint."
            )
        if dtype == "bfloat16":
            bits = numpy.frombuffer(content, dtype="<u2").astype(numpy.uint32) << 16
            array = bits.view(numpy.float32)
        else:
            array = numpy.frombuffer(content, dtype=dtype)
            if dtype == "<f2":
                array = array.astype(numpy.float32)
        return array.reshape(entry.shape).copy()


def _masked(crc: int) -> int:
    """TensorFlow stores crc32c values masked (rotated and offset), as LevelDB does."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def _varint(buffer: bytes, position: int, path: str) -> Tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise ConfigurationError(f"{path} is damaged: a number runs past its record.")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _table_records(table: bytes, path: str) -> Iterator[Tuple[bytes, bytes]]:
    """The key/value records of a LevelDB-style table, in key order."""
    if len(table) < _FOOTER_SIZE:
        raise ConfigurationError(f"{path} is {len(table)} bytes: too short for a TensorFlow checkpoint index.")
    footer = table[-_FOOTER_SIZE:]
    (magic,) = struct.unpack("<Q", footer[-8:])
    if magic != _TABLE_MAGIC:
        raise ConfigurationError(f"{path} is not a TensorFlow checkpoint index (no table magic number at its end).")
    _, position = _varint(footer, 0, path)  # the meta-index block: unused by TensorFlow
    _, position = _varint(footer, position, path)
    index_offset, position = _varint(footer, position, path)
    index_size, _ = _varint(footer, position, path)
    for _, handle in _block_records(_block(table, index_offset, index_size, path), path):
        offset, position = _varint(handle, 0, path)
        size, _ = _varint(handle, position, path)
        yield from _block_records(_block(table, offset, size, path), path)


def _block(table: bytes, offset: int, size: int, path: str) -> bytes:
    end = offset + size
    if end + _BLOCK_TRAILER_SIZE > len(table) - _FOOTER_SIZE:
        raise ConfigurationError(f"{path} is truncated or damaged: a block lies beyond its end.")
    contents = table[offset:end]
    compression = table[end]
    (stored,) = struct.unpack("<I", table[end + 1 : end + _BLOCK_TRAILER_SIZE])
    if _masked(google_crc32c.value(table[offset : end + 1])) != stored:
        raise ConfigurationError(f"{path} is damaged: a block at byte {offset} fails its crc32c check.")
    if compression != _NO_COMPRESSION:
        raise ConfigurationError(
            f"{path}: a block is compressed (type {compression}); TensorFlow writes checkpoint "
            "indexes uncompressed and only those are read."
        )
    return contents


def _block_records(block: bytes, path: str) -> Iterator[Tuple[bytes, bytes]]:
    if len(block) < 4:
        raise ConfigurationError(f"{path} is damaged: a block is too short.")
    (num_restarts,) = struct.unpack("<I", block[-4:])
    end = len(block) - 4 - 4 * num_restarts
    if end < 0:
        raise ConfigurationError(f"{path} is damaged: a block's restart points run past it.")
    position, key = 0, b""
    while position < end:
        shared, position = _varint(block, position, path)
        unshared, position = _varint(block, position, path)
        value_length, position = _varint(block, position, path)
        if shared > len(key) or position + unshared + value_length > end:
            raise ConfigurationError(f"{path} is damaged: a record runs past its block.")
        key = key[:shared] + block[position : position + unshared]
        position += unshared
        yield key, block[position : position + value_length]
        position += value_length


def _fields(message: bytes, path: str) -> Iterator[Tuple[int, object]]:
    """The (field number, value) pairs of a protocol buffer: ints for varint and fixed-width
    fields, bytes for length-delimited ones."""
    position = 0
    while position < len(message):
        tag, position = _varint(message, position, path)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _varint(message, position, path)
        elif wire_type == 1:
            (value,) = struct.unpack("<Q", message[position : position + 8])
            position += 8
        elif wire_type == 2:
            length, position = _varint(message, position, path)
            value = message[position : position + length]
            position += length
        elif wire_type == 5:
            (value,) = struct.unpack("<I", message[position : position + 4])
            position += 4
        else:
            raise ConfigurationError(f"{path} is damaged: a record has wire type {wire_type}.")
        if position > len(message):
            raise ConfigurationError(f"{path} is damaged: a record runs past its end.")
        yield number, value


def _header(message: bytes, path: str) -> Tuple[int, int]:
    """BundleHeaderProto: num_shards (1), endianness (2)."""
    num_shards, endianness = 1, _LITTLE_ENDIAN
    for number, value in _fields(message, path):
        if number == 1:
            num_shards = int(value)  # type: ignore
        elif number == 2:
            endianness = int(value)  # type: ignore
    if num_shards < 1:
        raise ConfigurationError(f"{path}: the bundle header names {num_shards} shards.")
    return num_shards, endianness


def _entry(name: str, message: bytes, path: str) -> BundleEntry:
    """BundleEntryProto: dtype (1), shape (2), shard_id (3), offset (4), size (5), crc32c (6),
    slices (7)."""
    fields: Dict[str, object] = {"dtype": 0, "shape": (), "shard": 0, "offset": 0, "size": 0,
                                 "masked_crc32c": 0, "sliced": False}
    for number, value in _fields(message, path):
        if number == 1:
            fields["dtype"] = value
        elif number == 2:
            fields["shape"] = _shape(value, path)  # type: ignore
        elif number == 3:
            fields["shard"] = value
        elif number == 4:
            fields["offset"] = value
        elif number == 5:
            fields["size"] = value
        elif number == 6:
            fields["masked_crc32c"] = value
        elif number == 7:
            fields["sliced"] = True
    return BundleEntry(name=name, **fields)  # type: ignore


def _shape(message: bytes, path: str) -> Tuple[int, ...]:
    """TensorShapeProto: dim (2) = Dim{size (1)}; unknown_rank (3)."""
    dims = []
    for number, value in _fields(message, path):
        if number == 2:
            size = 0
            for dim_number, dim_value in _fields(value, path):  # type: ignore
                if dim_number == 1:
                    size = int(dim_value)  # type: ignore
            dims.append(size)
        elif number == 3 and value:
            raise ConfigurationError(f"{path}: a tensor of unknown rank.")
    return tuple(dims)
