"""
The distinct tokens of a batch of character ids (`distinct_rows`): what
`torch.unique(character_ids, dim=0, return_inverse=True)` returns, in the same order, computed
by sorting a few packed integer keys per row instead of comparing rows element by element.

A token layer embeds each distinct token once (text repeats itself). PyTorch's CPU `unique`
over rows compares them one id at a time through a generic comparator, in a time that a
training step of the biLM (two calls on its windows' tokens) notices (BENCHMARKS.md).
Character ids are small (ELMo's are below 262, 9 bits), so several fit in one 63-bit integer
with their order kept: rows compare as their packed keys compare, and `numpy.lexsort` sorts a
handful of keys per row instead of 50 ids.
"""
from typing import Tuple

import numpy
import torch

# Bits of a non-negative int64 (the sign bit stays clear, so keys compare as unsigned would).
_KEY_BITS = 63


def distinct_rows(ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    The distinct rows of a 2-D integer tensor in ascending lexicographic order and, per row,
    the index of its copy among them: `torch.unique(ids, dim=0, return_inverse=True)`, equal to
    it element for element. CPU tensors are sorted by packed keys (see the module); others,
    and ids whose range needs more than 63 bits, go to `torch.unique`.

    # Parameters

    ids : `torch.Tensor`
        `(rows, width)` integers, e.g. a batch's character ids flattened to one row per token.

    # Returns

    `(distinct, inverse)`: `(distinct rows, width)` of `ids`' dtype, and `(rows,)` int64 with
    `distinct[inverse] == ids`.
    """
    if ids.device.type != "cpu" or ids.dim() != 2 or ids.numel() == 0 or ids.is_floating_point():
        return torch.unique(ids, dim=0, return_inverse=True)
    values = ids.numpy().astype(numpy.int64, copy=False)
    smallest, largest = int(values.min()), int(values.max())
    bits = max(1, (largest - smallest).bit_length())
    if bits > _KEY_BITS:
        return torch.unique(ids, dim=0, return_inverse=True)
    rows, width = values.shape
    per_key = _KEY_BITS // bits
    keys_per_row = -(-width // per_key)
    # (rows, keys_per_row, per_key): the ids from 0, padded with zeros to whole keys (every
    # row alike, so the padding changes no comparison), the first id in the highest bits.
    shifted = numpy.zeros((rows, keys_per_row * per_key), dtype=numpy.int64)
    numpy.subtract(values, smallest, out=shifted[:, :width])
    places = bits * numpy.arange(per_key - 1, -1, -1, dtype=numpy.int64)
    # (rows, keys_per_row): disjoint bits, so the sum is their concatenation
    keys = (shifted.reshape(rows, keys_per_row, per_key) << places).sum(axis=2)
    # A key that every row shares decides nothing (the padding past the batch's longest token);
    # the first stays, so that lexsort has one even where all rows are equal.
    varying = (keys != keys[0]).any(axis=0)
    varying[0] = True
    keys = keys[:, varying]
    # lexsort sorts by its last key first: the rows' first key is its most significant
    order = numpy.lexsort(keys.T[::-1])
    sorted_keys = keys[order]
    starts = numpy.ones(rows, dtype=bool)
    starts[1:] = (sorted_keys[1:] != sorted_keys[:-1]).any(axis=1)
    inverse = numpy.empty(rows, dtype=numpy.int64)
    inverse[order] = numpy.cumsum(starts) - 1
    return ids[torch.from_numpy(order[starts])], torch.from_numpy(inverse)
