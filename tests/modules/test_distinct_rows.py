"""
`distinct_rows` against its definition, `torch.unique(ids, dim=0, return_inverse=True)`:
equal outputs (order and dtype included) on any integer rows, and on a batch's character ids.
"""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from elmo_plugin.data.character_mapper import batch_to_ids
from elmo_plugin.modules.distinct_rows import distinct_rows


def assert_as_torch_unique(ids: torch.Tensor) -> None:
    distinct, inverse = distinct_rows(ids)
    expected_distinct, expected_inverse = torch.unique(ids, dim=0, return_inverse=True)
    assert distinct.dtype == expected_distinct.dtype and inverse.dtype == expected_inverse.dtype
    assert torch.equal(distinct, expected_distinct)
    assert torch.equal(inverse, expected_inverse)


# Rows drawn from a few candidates, so that copies are common; values from a range of any
# width up to the whole int64 (where no packing fits and `torch.unique` answers).
@st.composite
def integer_rows(draw):
    width = draw(st.integers(1, 70))
    bits = draw(st.sampled_from([1, 2, 9, 16, 31, 40, 62, 63]))
    low = draw(st.integers(-(2**63), 2**63 - 1))
    high = min(low + 2**bits - 1, 2**63 - 1)
    values = st.integers(low, high)
    candidates = draw(st.lists(st.lists(values, min_size=width, max_size=width), min_size=1, max_size=6))
    picks = draw(st.lists(st.integers(0, len(candidates) - 1), min_size=1, max_size=40))
    return torch.tensor([candidates[pick] for pick in picks], dtype=torch.long)


@settings(max_examples=200, deadline=None)
@given(integer_rows())
def test_equals_torch_unique_on_any_integer_rows(ids):
    assert_as_torch_unique(ids)


def test_equals_torch_unique_on_character_ids():
    sentences = [
        ["The", "cat", "sat", "on", "the", "mat", "."],
        ["The", "dog", "sat", "."],
        ["a" * 60, "ab", "a", "b", "ba", "The"],
        [],
    ]
    character_ids = batch_to_ids(sentences)
    # (tokens, 50), the padded positions' zeros included
    assert_as_torch_unique(character_ids.view(-1, character_ids.size(-1)))
    # another dtype, a strided view, one row, no rows
    assert_as_torch_unique(character_ids.view(-1, 50).int())
    assert_as_torch_unique(character_ids[:, 1:3].reshape(-1, 50)[:, ::2])
    assert_as_torch_unique(character_ids[0, :1])
    assert_as_torch_unique(character_ids[0, :0])
