"""TensorFlow's checkpoint format read without TensorFlow: every tensor as TensorFlow wrote it,
every damage named."""
import shutil

import h5py
import numpy
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights.tensor_bundle import TensorBundle
from tests.helpers import TENSORFLOW_FIXTURES

CHECKPOINT = TENSORFLOW_FIXTURES / "bilm_tf_checkpoint"
PREFIX = "model.ckpt-13"


@pytest.fixture
def checkpoint(tmp_path):
    """A copy to damage."""
    return shutil.copytree(CHECKPOINT, tmp_path / "checkpoint")


def test_every_tensor_of_a_bilm_tf_checkpoint():
    bundle = TensorBundle(str(CHECKPOINT / PREFIX), "fixture")
    assert bundle.num_shards == 1
    names = bundle.names()
    assert "global_step" in names and "lm/CNN/W_cnn_0/Adagrad" in names and "lm/softmax/W" in names
    # bilm-tf's dump_weights wrote these values from the same checkpoint with TensorFlow.
    with h5py.File(TENSORFLOW_FIXTURES / "bilm_tf_dump.hdf5", "r") as dump:
        numpy.testing.assert_array_equal(bundle.tensor("lm/CNN_proj/W_proj"), dump["CNN_proj/W_proj"][...])
        numpy.testing.assert_array_equal(bundle.tensor("lm/char_embed"), dump["char_embed"][...])
    assert bundle.tensor("global_step").shape == ()
    for name in names:
        assert bundle.tensor(name).dtype == numpy.float32


def test_two_shards_hold_the_same_tensors():
    one = TensorBundle(str(CHECKPOINT / PREFIX), "one shard")
    two = TensorBundle(str(TENSORFLOW_FIXTURES / "sharded_checkpoint" / PREFIX), "two shards")
    assert two.num_shards == 2 and {entry.shard for entry in two.entries.values()} == {0, 1}
    assert one.names() == two.names()
    for name in one.names():
        numpy.testing.assert_array_equal(one.tensor(name), two.tensor(name))


def test_a_missing_shard_is_named(tmp_path):
    directory = shutil.copytree(TENSORFLOW_FIXTURES / "sharded_checkpoint", tmp_path / "sharded")
    (directory / f"{PREFIX}.data-00001-of-00002").unlink()
    with pytest.raises(ConfigurationError, match=r"data shard .*model.ckpt-13.data-00001-of-00002 is missing"):
        TensorBundle(str(directory / PREFIX), "sharded")


def test_a_damaged_tensor_fails_its_checksum(checkpoint):
    bundle = TensorBundle(str(checkpoint / PREFIX), "damaged")
    entry = bundle.entries["lm/CNN_proj/W_proj"]
    data = checkpoint / f"{PREFIX}.data-00000-of-00001"
    content = bytearray(data.read_bytes())
    content[entry.offset + 5] ^= 0x40
    data.write_bytes(bytes(content))
    with pytest.raises(ConfigurationError, match="tensor 'lm/CNN_proj/W_proj' fails its crc32c check"):
        bundle.tensor("lm/CNN_proj/W_proj")
    bundle.tensor("lm/CNN_proj/b_proj")  # the others are intact


def test_a_truncated_shard_is_found_when_the_index_is_read(checkpoint):
    data = checkpoint / f"{PREFIX}.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(ConfigurationError, match="lies at bytes .* which has 1000 .a truncated shard"):
        TensorBundle(str(checkpoint / PREFIX), "truncated")


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda content: content[:20], "too short for a TensorFlow checkpoint index"),
        (lambda content: content[:-1] + b"\x00", "not a TensorFlow checkpoint index"),
        (lambda content: bytes([content[0] ^ 1]) + content[1:], "fails its crc32c check"),
    ],
    ids=["truncated", "no magic number", "flipped bit"],
)
def test_a_damaged_index_is_named(checkpoint, damage, expected):
    index = checkpoint / f"{PREFIX}.index"
    index.write_bytes(damage(index.read_bytes()))
    with pytest.raises(ConfigurationError, match=expected):
        TensorBundle(str(checkpoint / PREFIX), "damaged")
