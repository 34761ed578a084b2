"""`allennlp elmo`'s own argument types (the command itself runs in tests/inference)."""
import argparse

import pytest

from elmo_plugin.commands.elmo import _byte_count


@pytest.mark.parametrize("text, expected", [
    ("1048576", 2**20), ("500M", 500 * 2**20), ("2G", 2 * 2**30), ("2gb", 2 * 2**30),
    ("1.5K", 1536), (" 3T ", 3 * 2**40),
])
def test_shard_sizes_read_with_binary_multiples(text, expected):
    assert _byte_count(text) == expected


@pytest.mark.parametrize("text", ["", "G", "two", "2X", "0", "-1M", "inf"])
def test_bad_shard_sizes_say_what_was_expected(text):
    with pytest.raises(argparse.ArgumentTypeError, match="2G"):
        _byte_count(text)
