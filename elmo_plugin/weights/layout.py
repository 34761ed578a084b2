"""
The published ELMo weight file (HDF5, as written by bilm-tf's `dump_weights.py`).

This module is the only place that knows the layout; the loader (`ElmoBiLm`) and the exporter
both go through it. For options `o` the file holds, all float32:

| dataset | shape | meaning |
|---|---|---|
| `char_embed` | (261, o.char_embedding_dim) | character embeddings, no padding row |
| `CNN/W_cnn_{i}` | (1, width_i, o.char_embedding_dim, num_i) | TF conv2d kernel of filter i |
| `CNN/b_cnn_{i}` | (num_i,) | its bias |
| `CNN_high_{k}/W_transform`, `W_carry` | (o.n_filters, o.n_filters) | highway k, TF x @ W |
| `CNN_high_{k}/b_transform`, `b_carry` | (o.n_filters,) | |
| `CNN_proj/W_proj` | (o.n_filters, o.projection_dim) | projection to the LSTM input |
| `CNN_proj/b_proj` | (o.projection_dim,) | |
| `RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0` | (input + projection_dim, 4 * o.cell_dim) | direction d (0 forward, 1 backward), layer l; input and recurrent weights stacked, gates in TF order (input, new memory, forget, output) |
| `.../LSTMCell/B` | (4 * o.cell_dim,) | gate bias without TF's forget bias of 1.0 |
| `.../LSTMCell/W_P_0` | (o.cell_dim, o.projection_dim) | output projection |

A word-input biLM (options without `char_cnn`; our extension, the published files have no such
variant) holds, instead of the character datasets:

| dataset | shape | meaning |
|---|---|---|
| `embedding` | (o.n_tokens_vocab, o.projection_dim) float32 | row i: the input vector of word i |
| `vocabulary` | (o.n_tokens_vocab,) UTF-8 strings | the words, `<S>`, `</S>`, `<UNK>` among them |

The vocabulary lives in the weight file so that the options and weight pair is all a user
needs, as for character-input files. (bilm-tf kept a token biLM's embedding in a separate
file with a zero padding row first; our rows start with the first word.)

The PyTorch side (AllenNLP's parameter names, kept so that AllenNLP model archives load)
orders gates (input, forget, new memory, output), stores `x W^T` weights, folds the forget
bias into the bias, prepends a zero padding row to the character table and negates the
highway carry gate (AllenNLP's `Highway` gates the *linear* part). A biLM trained for export
keeps the gate bias as the file stores it, under
`...state_linearity.parametrizations.bias.original` (see `TfForgetBias`); the conversions
below map that name to `B` unchanged, so a trained bias round-trips bit-exactly.
"""
import warnings
from typing import Dict, Iterator, Tuple

import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import atomic_output_path
from elmo_plugin.weights.files import resolve_elmo_file
from elmo_plugin.weights.options import NUM_CHARACTERS_IN_FILE, ElmoOptions

with warnings.catch_warnings():
    # Old h5py builds warn about numpy aliases on import; the warning is about h5py itself.
    warnings.filterwarnings("ignore", category=FutureWarning)
    import h5py

TF_FORGET_BIAS = 1.0
DIRECTIONS = ("forward", "backward")


def lstm_cell_group(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


VOCABULARY = "vocabulary"


def dataset_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    """Every dataset of the published layout with its expected shape, in file order."""
    if options.word_inputs:
        if options.n_tokens_vocab is None:
            raise ConfigurationError(
                "The options of a word-input biLM need 'n_tokens_vocab' to describe its weights."
            )
        shapes: Dict[str, Tuple[int, ...]] = {
            "embedding": (options.n_tokens_vocab, options.projection_dim),
            VOCABULARY: (options.n_tokens_vocab,),
        }
        shapes.update(_lstm_shapes(options))
        return shapes
    shapes = {"char_embed": (NUM_CHARACTERS_IN_FILE, options.char_embedding_dim)}
    for i, (width, num) in enumerate(options.filters):  # type: ignore
        shapes[f"CNN/W_cnn_{i}"] = (1, width, options.char_embedding_dim, num)
        shapes[f"CNN/b_cnn_{i}"] = (num,)
    n_filters = options.n_filters
    for k in range(options.n_highway):
        for part in ("transform", "carry"):
            shapes[f"CNN_high_{k}/W_{part}"] = (n_filters, n_filters)
            shapes[f"CNN_high_{k}/b_{part}"] = (n_filters,)
    shapes["CNN_proj/W_proj"] = (n_filters, options.projection_dim)
    shapes["CNN_proj/b_proj"] = (options.projection_dim,)
    shapes.update(_lstm_shapes(options))
    return shapes


def _lstm_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    shapes: Dict[str, Tuple[int, ...]] = {}
    for direction in range(len(DIRECTIONS)):
        for layer in range(options.n_layers):
            group = lstm_cell_group(direction, layer)
            # Every layer's input is projection_dim wide: the char CNN projects to it.
            shapes[f"{group}/W_0"] = (2 * options.projection_dim, 4 * options.cell_dim)
            shapes[f"{group}/B"] = (4 * options.cell_dim,)
            shapes[f"{group}/W_P_0"] = (options.cell_dim, options.projection_dim)
    return shapes


def read_weight_file(weight_file: str, options: ElmoOptions) -> Dict[str, numpy.ndarray]:
    """
    Reads and checks every dataset of the layout; errors name the file, the dataset and the
    expected and actual shapes.
    """
    local_path = resolve_elmo_file(weight_file, "ELMo weight file")
    try:
        handle = h5py.File(local_path, "r")
    except OSError as error:
        raise ConfigurationError(
            f"ELMo weight file {weight_file} is not a readable HDF5 file "
            f"(truncated or of another format?): {error}"
        ) from error
    arrays: Dict[str, numpy.ndarray] = {}
    with handle:
        for name, expected_shape in dataset_shapes(options).items():
            if name not in handle or not isinstance(handle[name], h5py.Dataset):
                raise ConfigurationError(
                    f"ELMo weight file {weight_file} has no dataset '{name}' "
                    f"(expected shape {expected_shape} for these options)."
                )
            dataset = handle[name]
            if tuple(dataset.shape) != expected_shape:
                raise ConfigurationError(
                    f"ELMo weight file {weight_file}: dataset '{name}' has shape "
                    f"{tuple(dataset.shape)}, but the options require {expected_shape}."
                )
            try:
                if name == VOCABULARY:
                    arrays[name] = numpy.array(dataset.asstr()[...], dtype=object)
                else:
                    arrays[name] = numpy.asarray(dataset[...], dtype=numpy.float32)
            except OSError as error:
                raise ConfigurationError(
                    f"ELMo weight file {weight_file}: dataset '{name}' cannot be read "
                    f"(truncated file?): {error}"
                ) from error
    return arrays


def write_weight_file(path: str, arrays: Dict[str, numpy.ndarray], options: ElmoOptions) -> None:
    """
    Writes `arrays` in the published layout. The file appears under `path` only once it is
    complete (written to a temporary file in the same directory, then renamed).
    """
    expected = dataset_shapes(options)
    if set(arrays) != set(expected):
        missing, unexpected = set(expected) - set(arrays), set(arrays) - set(expected)
        raise ValueError(f"Arrays do not match the layout: missing {missing}, extra {unexpected}")
    with atomic_output_path(path, suffix=".hdf5.partial") as temporary_path:
        with h5py.File(temporary_path, "w") as handle:
            for name, shape in expected.items():
                if name == VOCABULARY:
                    array = numpy.array(list(arrays[name]), dtype=h5py.string_dtype("utf-8"))
                else:
                    array = numpy.asarray(arrays[name], dtype=numpy.float32)
                if array.shape != shape:
                    raise ValueError(f"Array '{name}' has shape {array.shape}, expected {shape}")
                handle.create_dataset(name, data=array)


def _tf_to_torch_gate_order(matrix: numpy.ndarray, cell_dim: int) -> numpy.ndarray:
    """Swaps the 2nd and 3rd gate blocks along axis 0; the swap is its own inverse."""
    reordered = matrix.copy()
    reordered[cell_dim : 2 * cell_dim] = matrix[2 * cell_dim : 3 * cell_dim]
    reordered[2 * cell_dim : 3 * cell_dim] = matrix[cell_dim : 2 * cell_dim]
    return reordered


def _lstm_parameter_prefixes(options: ElmoOptions) -> Iterator[Tuple[str, str]]:
    for direction, direction_name in enumerate(DIRECTIONS):
        for layer in range(options.n_layers):
            yield lstm_cell_group(direction, layer), f"_elmo_lstm.{direction_name}_layer_{layer}"


# Parameter names of a cell's gate bias: folded (AllenNLP's) and as in the file (`TfForgetBias`).
_FOLDED_BIAS = "state_linearity.bias"
_FILE_BIAS = "state_linearity.parametrizations.bias.original"


def to_state_dict(
    arrays: Dict[str, numpy.ndarray], options: ElmoOptions, bias_as_in_file: bool = False
) -> Dict[str, torch.Tensor]:
    """
    Published arrays -> parameters of `ElmoBiLm` (names relative to it). `bias_as_in_file`:
    the LSTM cells' biases are parametrized with `TfForgetBias` (forget bias not folded in).
    """
    state: Dict[str, numpy.ndarray] = {}
    if options.word_inputs:
        state["_token_embedder.embedding.weight"] = arrays["embedding"]
    else:
        state.update(_character_encoder_state(arrays, options))
    cell_dim, input_dim = options.cell_dim, options.projection_dim
    for group, prefix in _lstm_parameter_prefixes(options):
        weights = _tf_to_torch_gate_order(arrays[f"{group}/W_0"].T, cell_dim)
        bias = arrays[f"{group}/B"].copy()
        if not bias_as_in_file:
            bias[2 * cell_dim : 3 * cell_dim] += numpy.float32(TF_FORGET_BIAS)
        bias_name = _FILE_BIAS if bias_as_in_file else _FOLDED_BIAS
        state[f"{prefix}.input_linearity.weight"] = weights[:, :input_dim]
        state[f"{prefix}.state_linearity.weight"] = weights[:, input_dim:]
        state[f"{prefix}.{bias_name}"] = _tf_to_torch_gate_order(bias, cell_dim)
        state[f"{prefix}.state_projection.weight"] = arrays[f"{group}/W_P_0"].T
    return {
        name: torch.from_numpy(numpy.ascontiguousarray(value, dtype=numpy.float32))
        for name, value in state.items()
    }


def _character_encoder_state(
    arrays: Dict[str, numpy.ndarray], options: ElmoOptions
) -> Dict[str, numpy.ndarray]:
    state: Dict[str, numpy.ndarray] = {}
    char_table = numpy.zeros(
        (NUM_CHARACTERS_IN_FILE + 1, options.char_embedding_dim), dtype=numpy.float32
    )
    char_table[1:] = arrays["char_embed"]
    state["_token_embedder._char_embedding_weights"] = char_table
    for i in range(len(options.filters)):
        kernel = arrays[f"CNN/W_cnn_{i}"].squeeze(axis=0)  # (width, char_dim, num)
        state[f"_token_embedder.char_conv_{i}.weight"] = numpy.transpose(kernel, (2, 1, 0))
        state[f"_token_embedder.char_conv_{i}.bias"] = arrays[f"CNN/b_cnn_{i}"]
    for k in range(options.n_highway):
        group = f"CNN_high_{k}"
        state[f"_token_embedder._highways._layers.{k}.weight"] = numpy.concatenate(
            [arrays[f"{group}/W_transform"].T, -arrays[f"{group}/W_carry"].T], axis=0
        )
        state[f"_token_embedder._highways._layers.{k}.bias"] = numpy.concatenate(
            [arrays[f"{group}/b_transform"], -arrays[f"{group}/b_carry"]], axis=0
        )
    state["_token_embedder._projection.weight"] = arrays["CNN_proj/W_proj"].T
    state["_token_embedder._projection.bias"] = arrays["CNN_proj/b_proj"]
    return state


def from_state_dict(state: Dict[str, torch.Tensor], options: ElmoOptions) -> Dict[str, numpy.ndarray]:
    """
    Parameters of `ElmoBiLm` (names relative to it) -> published arrays; inverse of
    `to_state_dict`. Biases kept as in the file (`TfForgetBias`) are written unchanged.
    """

    def get(name: str) -> numpy.ndarray:
        return state[name].detach().cpu().to(torch.float32).numpy()

    arrays: Dict[str, numpy.ndarray] = {}
    if options.word_inputs:
        arrays["embedding"] = get("_token_embedder.embedding.weight")
    else:
        arrays.update(_character_encoder_arrays(get, options))
    cell_dim = options.cell_dim
    for group, prefix in _lstm_parameter_prefixes(options):
        weights = numpy.concatenate(
            [get(f"{prefix}.input_linearity.weight"), get(f"{prefix}.state_linearity.weight")],
            axis=1,
        )
        arrays[f"{group}/W_0"] = _tf_to_torch_gate_order(weights, cell_dim).T
        if f"{prefix}.{_FILE_BIAS}" in state:
            bias = _tf_to_torch_gate_order(get(f"{prefix}.{_FILE_BIAS}"), cell_dim)
        else:
            bias = _tf_to_torch_gate_order(get(f"{prefix}.{_FOLDED_BIAS}"), cell_dim)
            bias[2 * cell_dim : 3 * cell_dim] -= numpy.float32(TF_FORGET_BIAS)
        arrays[f"{group}/B"] = bias
        arrays[f"{group}/W_P_0"] = get(f"{prefix}.state_projection.weight").T
    return {name: numpy.ascontiguousarray(value) for name, value in arrays.items()}


def _character_encoder_arrays(get, options: ElmoOptions) -> Dict[str, numpy.ndarray]:
    arrays = {"char_embed": get("_token_embedder._char_embedding_weights")[1:]}
    for i in range(len(options.filters)):  # type: ignore
        kernel = numpy.transpose(get(f"_token_embedder.char_conv_{i}.weight"), (2, 1, 0))
        arrays[f"CNN/W_cnn_{i}"] = kernel[numpy.newaxis]
        arrays[f"CNN/b_cnn_{i}"] = get(f"_token_embedder.char_conv_{i}.bias")
    n_filters = options.n_filters
    for k in range(options.n_highway):
        weight = get(f"_token_embedder._highways._layers.{k}.weight")
        bias = get(f"_token_embedder._highways._layers.{k}.bias")
        arrays[f"CNN_high_{k}/W_transform"] = weight[:n_filters].T
        arrays[f"CNN_high_{k}/W_carry"] = -weight[n_filters:].T
        arrays[f"CNN_high_{k}/b_transform"] = bias[:n_filters]
        arrays[f"CNN_high_{k}/b_carry"] = -bias[n_filters:]
    arrays["CNN_proj/W_proj"] = get("_token_embedder._projection.weight").T
    arrays["CNN_proj/b_proj"] = get("_token_embedder._projection.bias")
    return arrays
