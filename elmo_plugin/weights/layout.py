"""
The published ELMo weight layout (HDF5, as written by bilm-tf's `dump_weights.py`): the names
and shapes of its datasets, and the TensorFlow conventions they follow. This module describes
the file; each network block maps its own parameters to these datasets beside its own code
(`parameters_from_arrays` / `arrays_from_parameters`), and each weight format
(`elmo_plugin.weights.formats`) reads and writes arrays named as here.

For options `o` a character-input biLM holds, all float32:

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

An ELMoForManyLangs biLM (options with `char_cnn.characters` = `"elmoformanylangs"`; our
extension) reads Unicode characters from a vocabulary and concatenates a word vector before the
projection. It holds the CNN, highway and LSTM datasets as above, and:

| dataset | shape | meaning |
|---|---|---|
| `char_embed` | (o.n_characters, o.char_embedding_dim) | one row per character of the vocabulary, its padding row included |
| `char_vocabulary` | (o.n_characters,) UTF-8 strings | the characters in row order, with ELMoForManyLangs' `<bow>`, `<eow>`, `<bos>`, `<eos>`, `<oov>`, `<pad>` |
| `word_embed` | (o.n_words, o.word_dim) | the word vectors (only with a `word_embedding` section) |
| `word_vocabulary` | (o.n_words,) UTF-8 strings | the words in row order, `<bos>`, `<eos>`, `<oov>`, `<pad>` among them |
| `CNN_proj/W_proj` | (o.word_dim + o.n_filters, o.projection_dim) | rows: the word vector's, then the char CNN's |

A biLM with its softmax (options with `softmax_in_weights`; our extension, so that fine-tuning
starts from the trained softmax; the published files, which AllenNLP reads by name, have
none) holds besides:

| dataset | shape | meaning |
|---|---|---|
| `softmax/W` | (o.n_tokens_vocab, o.projection_dim) | row i: the output vector of word i (absent when tied to a word-input biLM's `embedding`) |
| `softmax/b` | (o.n_tokens_vocab,) | its bias |
| `vocabulary` | (o.n_tokens_vocab,) UTF-8 strings | the words (a word-input biLM's own) |

The PyTorch side (AllenNLP's parameter names, kept so that AllenNLP model archives load)
orders gates (input, forget, new memory, output), stores `x W^T` weights, folds the forget
bias into the bias, prepends a zero padding row to the byte-level character table and negates
the highway carry gate (AllenNLP's `Highway` gates the *linear* part). The conversions between
PyTorch's tensors and the file's are the functions at the end of this module: the blocks'
mappings and the formats whose files hold PyTorch tensors use them.
"""
from typing import Dict, List, Mapping, Optional, Tuple

import numpy
from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights.options import (
    ELMOFORMANYLANGS_CHARACTERS,
    NUM_CHARACTERS_IN_FILE,
    ElmoOptions,
)

TF_FORGET_BIAS = 1.0
DIRECTIONS = ("forward", "backward")

CHAR_EMBEDDING = "char_embed"
PROJECTION_WEIGHT = "CNN_proj/W_proj"
PROJECTION_BIAS = "CNN_proj/b_proj"
WORD_EMBEDDING = "embedding"
VOCABULARY = "vocabulary"
CHAR_VOCABULARY = "char_vocabulary"
WORD_VECTORS = "word_embed"
WORD_VOCABULARY = "word_vocabulary"
SOFTMAX_WEIGHT = "softmax/W"
SOFTMAX_BIAS = "softmax/b"
# Datasets that hold strings, not float32 arrays.
STRING_DATASETS = frozenset({VOCABULARY, CHAR_VOCABULARY, WORD_VOCABULARY})


def cnn_weight(filter_index: int) -> str:
    return f"CNN/W_cnn_{filter_index}"


def cnn_bias(filter_index: int) -> str:
    return f"CNN/b_cnn_{filter_index}"


def highway_dataset(layer: int, part: str) -> str:
    """`part`: `W_transform`, `W_carry`, `b_transform` or `b_carry`."""
    return f"CNN_high_{layer}/{part}"


def lstm_cell_group(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def dataset_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    """Every dataset of the layout for `options` with its expected shape, in file order."""
    shapes = _bilm_shapes(options)
    if options.softmax_in_weights:
        assert options.n_tokens_vocab is not None  # the options check it
        if not options.share_embedding_softmax:
            shapes[SOFTMAX_WEIGHT] = (options.n_tokens_vocab, options.projection_dim)
        shapes[SOFTMAX_BIAS] = (options.n_tokens_vocab,)
        shapes[VOCABULARY] = (options.n_tokens_vocab,)
    return shapes


def trained_softmax(
    arrays: Mapping[str, numpy.ndarray], options: ElmoOptions
) -> Tuple[List[str], Optional[numpy.ndarray], numpy.ndarray]:
    """The softmax of a weight file with `softmax_in_weights`: its words, its output vectors
    (`None` when tied to the word embedding) and its biases."""
    words = [str(word) for word in arrays[VOCABULARY]]
    weight = None if options.share_embedding_softmax else arrays[SOFTMAX_WEIGHT]
    return words, weight, arrays[SOFTMAX_BIAS]


def _bilm_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    if options.word_inputs:
        if options.n_tokens_vocab is None:
            raise ConfigurationError(
                "The options of a word-input biLM need 'n_tokens_vocab' to describe its weights."
            )
        shapes: Dict[str, Tuple[int, ...]] = {
            WORD_EMBEDDING: (options.n_tokens_vocab, options.projection_dim),
            VOCABULARY: (options.n_tokens_vocab,),
        }
        shapes.update(_lstm_shapes(options))
        return shapes
    if options.characters == ELMOFORMANYLANGS_CHARACTERS:
        shapes = {
            CHAR_EMBEDDING: (options.n_characters, options.char_embedding_dim),
            CHAR_VOCABULARY: (options.n_characters,),
        }
    else:
        shapes = {CHAR_EMBEDDING: (NUM_CHARACTERS_IN_FILE, options.char_embedding_dim)}
    for i, (width, num) in enumerate(options.filters):  # type: ignore
        shapes[cnn_weight(i)] = (1, width, options.char_embedding_dim, num)
        shapes[cnn_bias(i)] = (num,)
    n_filters = options.n_filters
    for k in range(options.n_highway):
        for part in ("transform", "carry"):
            shapes[highway_dataset(k, f"W_{part}")] = (n_filters, n_filters)
            shapes[highway_dataset(k, f"b_{part}")] = (n_filters,)
    if options.word_dim is not None:
        shapes[WORD_VECTORS] = (options.n_words, options.word_dim)
        shapes[WORD_VOCABULARY] = (options.n_words,)
    shapes[PROJECTION_WEIGHT] = (options.token_features, options.projection_dim)
    shapes[PROJECTION_BIAS] = (options.projection_dim,)
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


def swap_tf_and_torch_gate_order(matrix: numpy.ndarray, cell_dim: int) -> numpy.ndarray:
    """
    TF's gate blocks (input, new memory, forget, output) <-> PyTorch's (input, forget, new
    memory, output) along axis 0: swaps the 2nd and 3rd blocks, so it is its own inverse.
    """
    reordered = matrix.copy()
    reordered[cell_dim : 2 * cell_dim] = matrix[2 * cell_dim : 3 * cell_dim]
    reordered[2 * cell_dim : 3 * cell_dim] = matrix[cell_dim : 2 * cell_dim]
    return reordered


# Conversions between PyTorch's tensors and the file's (TensorFlow's).


def cnn_kernel(conv_weight: numpy.ndarray) -> numpy.ndarray:
    """A `Conv1d` weight `(filters, char_dim, width)` as TF's conv2d kernel `(1, width, char_dim, filters)`."""
    return numpy.transpose(conv_weight, (2, 1, 0))[numpy.newaxis]


def conv_weight(kernel: numpy.ndarray) -> numpy.ndarray:
    """Inverse of `cnn_kernel`."""
    return numpy.transpose(kernel.squeeze(axis=0), (2, 1, 0))


def highway_datasets(layer: int, weight: numpy.ndarray, bias: numpy.ndarray) -> Dict[str, numpy.ndarray]:
    """
    An AllenNLP `Highway` layer (`weight` `(2n, n)`: the transform's rows, then the gate's, which
    gates the untransformed input) as highway `layer`'s datasets (bilm-tf's carry gate gates the
    transform, so its sign is flipped).
    """
    n = weight.shape[1]
    return {
        highway_dataset(layer, "W_transform"): weight[:n].T,
        highway_dataset(layer, "W_carry"): -weight[n:].T,
        highway_dataset(layer, "b_transform"): bias[:n],
        highway_dataset(layer, "b_carry"): -bias[n:],
    }


def highway_parameters(arrays: Mapping[str, numpy.ndarray], layer: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Inverse of `highway_datasets`: highway `layer`'s `(weight, bias)` for AllenNLP's `Highway`."""
    part = lambda name: arrays[highway_dataset(layer, name)]  # noqa: E731
    return (
        numpy.concatenate([part("W_transform").T, -part("W_carry").T], axis=0),
        numpy.concatenate([part("b_transform"), -part("b_carry")], axis=0),
    )


def lstm_cell_datasets(
    group: str,
    input_weight: numpy.ndarray,
    state_weight: numpy.ndarray,
    bias: numpy.ndarray,
    projection_weight: numpy.ndarray,
    bias_holds_forget_offset: bool = True,
) -> Dict[str, numpy.ndarray]:
    """
    A PyTorch LSTM cell with projection (AllenNLP's `LstmCellWithProjection`: gates input,
    forget, new memory, output; `x W^T` weights) as the datasets of cell `group`. The bias
    holds TF's forget offset of 1.0 unless `bias_holds_forget_offset` is false (a bias kept as
    the file stores it, see `TfForgetBias`).
    """
    cell_dim = bias.shape[0] // 4
    weights = numpy.concatenate([input_weight, state_weight], axis=1)
    bias = swap_tf_and_torch_gate_order(bias, cell_dim)
    if bias_holds_forget_offset:
        bias[2 * cell_dim : 3 * cell_dim] -= numpy.float32(TF_FORGET_BIAS)
    return {
        f"{group}/W_0": swap_tf_and_torch_gate_order(weights, cell_dim).T,
        f"{group}/B": bias,
        f"{group}/W_P_0": projection_weight.T,
    }


def lstm_cell_parameters(
    arrays: Mapping[str, numpy.ndarray], group: str, input_size: int, add_forget_offset: bool = True
) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """Inverse of `lstm_cell_datasets`: `(input_weight, state_weight, bias, projection_weight)`."""
    bias = arrays[f"{group}/B"].copy()
    cell_dim = bias.shape[0] // 4
    if add_forget_offset:
        bias[2 * cell_dim : 3 * cell_dim] += numpy.float32(TF_FORGET_BIAS)
    weights = swap_tf_and_torch_gate_order(arrays[f"{group}/W_0"].T, cell_dim)
    return (
        weights[:, :input_size],
        weights[:, input_size:],
        swap_tf_and_torch_gate_order(bias, cell_dim),
        arrays[f"{group}/W_P_0"].T,
    )
