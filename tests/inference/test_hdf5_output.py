"""
The chunk writer's low-level dataset creation and the merge's low-level copy (one dataset per
line makes per-dataset overhead count) write the same files, byte for byte, as h5py's
high-level calls they replace.
"""
import filecmp

import h5py
import numpy

from elmo_plugin.inference.hdf5_output import ChunkWriter, _copy_dataset
from elmo_plugin.inference.output_vectors import OutputVectors

KEYS = ["0", "17", "über naïve", "東京 x", "a/b c"]


def _arrays():
    generator = numpy.random.default_rng(0)
    shapes = [(3, 4, 8), (3, 0, 8), (2, 8), (8,), (3, 1, 8)]
    return [generator.standard_normal(shape).astype(numpy.float32) for shape in shapes]


def test_a_copied_dataset_is_the_file_h5pys_copy_writes(tmp_path):
    with h5py.File(tmp_path / "chunk.hdf5", "w") as chunk:
        for index, data in enumerate(_arrays()):
            chunk.create_dataset(str(index), data=data)
    for name in ("ours", "h5py"):
        with h5py.File(tmp_path / "chunk.hdf5", "r") as chunk, h5py.File(tmp_path / f"{name}.hdf5", "w") as output:
            for index, key in enumerate(KEYS):
                if name == "ours":
                    assert _copy_dataset(chunk, str(index), output, key) == chunk[str(index)].nbytes
                else:
                    source = chunk[str(index)]
                    source.parent.copy(source, output, name=key)
    assert filecmp.cmp(tmp_path / "ours.hdf5", tmp_path / "h5py.hdf5", shallow=False)
    with h5py.File(tmp_path / "ours.hdf5", "r") as output:
        assert numpy.array_equal(output["a"]["b c"][...], _arrays()[4])
        assert numpy.array_equal(output["東京 x"][...], _arrays()[3])


def test_a_written_sentence_is_the_dataset_h5pys_create_dataset_writes(tmp_path):
    # Every layer of each sentence, as float32 and as float16 (converted on the way).
    arrays = [array for array in _arrays() if array.ndim == 3]
    for dtype in ("float32", "float16"):
        with h5py.File(tmp_path / f"ours_{dtype}.hdf5", "w") as handle:
            writer = ChunkWriter(handle, [str(row) for row in range(len(arrays))], OutputVectors("all"), 3, 8, dtype)
            for row, array in enumerate(arrays):
                writer.whole(row, array.astype(numpy.float64))
        with h5py.File(tmp_path / f"h5py_{dtype}.hdf5", "w") as handle:
            for row, array in enumerate(arrays):
                handle.create_dataset(str(row), data=array.astype(dtype))
        assert filecmp.cmp(tmp_path / f"ours_{dtype}.hdf5", tmp_path / f"h5py_{dtype}.hdf5", shallow=False)
