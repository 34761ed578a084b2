"""
The published ELMo format: an options JSON and an HDF5 weight file in the layout bilm-tf's
`dump_weights.py` writes (`elmo_plugin.weights.layout`), as AllenNLP publishes its models and
`allennlp elmo-export` writes ours.
"""
import os
import warnings
from typing import Dict, List, Mapping, Optional

import numpy
from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats.base import BiLmWeights, ModelFiles, WeightFormat
from elmo_plugin.weights.options import ElmoOptions

with warnings.catch_warnings():
    # Old h5py builds warn about numpy aliases on import; the warning is about h5py itself.
    warnings.filterwarnings("ignore", category=FutureWarning)
    import h5py

OPTIONS_NAME = "options.json"
_SOFTMAX_DATASETS = {layout.SOFTMAX_WEIGHT, layout.SOFTMAX_BIAS, layout.VOCABULARY}
WEIGHTS_NAME = "weights.hdf5"


@WeightFormat.register("published")
class PublishedFormat(WeightFormat):
    """
    An options JSON file and an HDF5 weight file, given as two paths or URLs, or a directory
    (or archive) that holds `options.json` and one `.hdf5` file: what `allennlp elmo-export`
    writes, and the NLPL repository's bilm-tf models (`options.json`, `model.hdf5`,
    `vocab.txt`).
    """

    expects = (
        "an options JSON file and an HDF5 weight file as two paths or URLs, or a directory or "
        f"archive with {OPTIONS_NAME} and one .hdf5 file"
    )

    def recognizes(self, files: ModelFiles) -> bool:
        directory = files.model_directory()
        if directory is not None:
            return os.path.isfile(os.path.join(directory, OPTIONS_NAME)) and bool(_hdf5_files(directory))
        return (
            files.options_path is not None
            and files.weight_path is not None
            and not os.path.isdir(files.options_path)
            and os.path.isfile(files.weight_path)
            # A TensorFlow checkpoint's index (the `tensorflow` format's).
            and not files.weight_path.endswith(".index")
        )

    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        directory = files.model_directory()
        if directory is not None:
            files = _files_in_directory(files, directory)
        if options is None:
            if files.options_path is None:
                raise ConfigurationError(f"The ELMo weight file {files.weight_file} needs its options file.")
            options = ElmoOptions.from_local_file(files.options_path, str(files.options_file))
        if files.weight_path is None:
            raise ConfigurationError(f"The ELMo options {files.options_file} need a weight file.")
        arrays = read_weight_file(files.weight_path, options, str(files.weight_file))
        return BiLmWeights(options=options, arrays=arrays, source=files.describe())

    def write(self, weights: BiLmWeights, directory: str) -> Dict[str, str]:
        paths = {
            "options": os.path.join(directory, OPTIONS_NAME),
            "weights": os.path.join(directory, WEIGHTS_NAME),
        }
        write_weight_file(paths["weights"], weights.arrays, weights.options)
        weights.options.to_file(paths["options"])
        return paths


def _hdf5_files(directory: str) -> List[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".hdf5"))


def _files_in_directory(files: ModelFiles, directory: str) -> ModelFiles:
    """The options and weight file inside a model directory, named after what the user gave."""
    source = files.weight_file or files.options_file
    weight_names = _hdf5_files(directory)
    if len(weight_names) > 1:
        raise ConfigurationError(
            f"The ELMo model {source} holds several HDF5 files ({', '.join(weight_names)}); "
            "give the options file and the weight file as two paths."
        )
    return ModelFiles(
        options_file=f"{source} ({OPTIONS_NAME})",
        weight_file=f"{source} ({weight_names[0]})",
        options_path=os.path.join(directory, OPTIONS_NAME),
        weight_path=os.path.join(directory, weight_names[0]),
    )


def read_weight_file(path: str, options: ElmoOptions, source: str) -> Dict[str, numpy.ndarray]:
    """
    Reads and checks every dataset the layout expects for `options` from the local HDF5 file
    `path`; errors name `source` (what the user gave), the dataset and the expected and actual
    shapes.
    """
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise ConfigurationError(
            f"ELMo weight file {source} is not a readable HDF5 file "
            f"(truncated or of another format?): {error}"
        ) from error
    arrays: Dict[str, numpy.ndarray] = {}
    expected_shapes = layout.dataset_shapes(options)
    with handle:
        in_file: List[str] = []
        handle.visititems(lambda name, node: in_file.append(name) if isinstance(node, h5py.Dataset) else None)
        # A softmax the options do not ask for is not part of the biLM: left unread.
        unexpected = sorted(set(in_file) - set(expected_shapes) - _SOFTMAX_DATASETS)
        if unexpected:
            shown = ", ".join(f"'{name}'" for name in unexpected[:5])
            raise ConfigurationError(
                f"ELMo weight file {source} holds {len(unexpected)} dataset(s) that the options do "
                f"not describe ({shown}{', ...' if len(unexpected) > 5 else ''}): the options and "
                "the weights are of different biLMs (more highway layers, LSTM layers or filters "
                "in the file than in the options?)."
            )
        for name, expected_shape in expected_shapes.items():
            if name not in handle or not isinstance(handle[name], h5py.Dataset):
                raise ConfigurationError(
                    f"ELMo weight file {source} has no dataset '{name}' "
                    f"(expected shape {expected_shape} for these options)."
                )
            dataset = handle[name]
            if tuple(dataset.shape) != expected_shape:
                raise ConfigurationError(
                    f"ELMo weight file {source}: dataset '{name}' has shape "
                    f"{tuple(dataset.shape)}, but the options require {expected_shape}."
                )
            try:
                if name in layout.STRING_DATASETS:
                    arrays[name] = numpy.array(dataset.asstr()[...], dtype=object)
                else:
                    arrays[name] = numpy.asarray(dataset[...], dtype=numpy.float32)
            except OSError as error:
                raise ConfigurationError(
                    f"ELMo weight file {source}: dataset '{name}' cannot be read "
                    f"(truncated file?): {error}"
                ) from error
    return arrays


def write_weight_file(path: str, arrays: Mapping[str, numpy.ndarray], options: ElmoOptions) -> None:
    """
    Writes `arrays` in the layout. The file appears under `path` only once it is complete
    (written to a temporary file in the same directory, then renamed).
    """
    expected = layout.dataset_shapes(options)
    if set(arrays) != set(expected):
        missing, unexpected = set(expected) - set(arrays), set(arrays) - set(expected)
        raise ValueError(f"Arrays do not match the layout: missing {missing}, extra {unexpected}")
    with atomic_output_path(path, suffix=".hdf5.partial") as temporary_path:
        with h5py.File(temporary_path, "w") as handle:
            for name, shape in expected.items():
                if name in layout.STRING_DATASETS:
                    array = numpy.array(list(arrays[name]), dtype=h5py.string_dtype("utf-8"))
                else:
                    array = numpy.asarray(arrays[name], dtype=numpy.float32)
                if array.shape != shape:
                    raise ValueError(f"Array '{name}' has shape {array.shape}, expected {shape}")
                handle.create_dataset(name, data=array)
