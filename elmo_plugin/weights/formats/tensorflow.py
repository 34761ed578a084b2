"""
biLMs as TensorFlow saved them, read without TensorFlow (`elmo_plugin.weights.tensor_bundle`):

- **bilm-tf checkpoints**: its save directory (`checkpoint`, `options.json`,
  `model.ckpt-N.index`, `model.ckpt-N.data-*`), or a checkpoint prefix (`.../model.ckpt-N`) or
  its `.index` file. Variables of bilm-tf's training graph, under `lm/`, with the optimizer's
  slots beside them; the softmax (`lm/softmax/W`, `b`) too.
- **TF-Hub ELMo modules** and other SavedModels of bilm-tf's inference graph (google/elmo,
  DeepPavlov's ELMo): a directory with `saved_model.pb` or `tfhub_module.pb` and
  `variables/variables.*`. Variables under `bilm/`; the character table has a padding row
  first; `aggregation/weights` and `aggregation/scaling` are google/elmo's layer mix.

Both name the tensors of the published layout (`layout`) in TensorFlow's own words; this module
is that second naming and nothing more: the values are copied as they are (bilm-tf's
`dump_weights` copies them too).

The architecture comes from, in this order: options given with the files, the `options.json`
of a bilm-tf save directory, or the tensors' shapes. Shapes show every size but not the LSTM
clip values, the activation, the skip connections or the token length; for those a biLM
without options gets the published ELMo's values (3, 3, relu, residual, 50), with a warning.
Options given or found are checked against every tensor.
"""
import dataclasses
import logging
import os
import re
from typing import Dict, List, Mapping, Optional

import numpy
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.vocab_file import VOCAB_FILE_NAME, read_bilm_vocab_file
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats.base import BiLmWeights, ModelFiles, WeightFormat
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.tensor_bundle import INDEX_SUFFIX, TensorBundle

logger = logging.getLogger(__name__)

CHECKPOINT_STATE_NAME = "checkpoint"
OPTIONS_NAME = "options.json"
# A bilm-tf save directory does not hold the vocabulary; one put beside it under these names
# is read with the softmax.
VOCABULARY_NAMES = (VOCAB_FILE_NAME, "vocabulary.txt")
SAVED_MODEL_NAMES = ("saved_model.pb", "tfhub_module.pb")
SAVED_MODEL_VARIABLES = os.path.join("variables", "variables")
AGGREGATION_WEIGHTS = "aggregation/weights"
AGGREGATION_SCALING = "aggregation/scaling"
# DeepPavlov's modules (its elmo2tfhub) name the same mix so.
DEEPPAVLOV_WEIGHTS = "aggregation/elmo_output_ELMo_W"
DEEPPAVLOV_GAMMA = "aggregation/elmo_output_ELMo_gamma"
# (weights, gamma) of the layer mixes a module may hold, and whose `default` output is the
# mean over tokens of the mix with gamma (google/elmo) or without it (DeepPavlov).
LAYER_MIXES = (
    (AGGREGATION_WEIGHTS, AGGREGATION_SCALING, "google"),
    (DEEPPAVLOV_WEIGHTS, DEEPPAVLOV_GAMMA, "deeppavlov"),
)
SCALAR_MIX = "scalar_mix"

# What the shapes cannot show: the published ELMo's values (and bilm-tf's usual recipe).
_ASSUMED = {"cell_clip": 3.0, "proj_clip": 3.0, "use_skip_connections": True, "activation": "relu",
            "max_characters_per_token": 50}

# A variable's name within the biLM's scope, and what it is in the published layout.
_CNN = re.compile(r"CNN/(W|b)_cnn_(\d+)$")
_HIGHWAY = re.compile(r"CNN_high_(\d+)/(W_carry|b_carry|W_transform|b_transform)$")
_PROJECTION = re.compile(r"CNN_proj/(W_proj|b_proj)$")
# bilm-tf's training graph (static_rnn over MultiRNNCell, or one LSTMCell), and its inference
# graph (dynamic_rnn per layer); `weights`/`biases` were the names of TF < 1.2.
_LSTM = re.compile(
    r"RNN_(?P<direction>\d+)/(?:rnn/multi_rnn_cell/cell_(?P<train_layer>\d+)/|rnn/|"
    r"RNN/MultiRNNCell/Cell(?P<layer>\d+)/rnn/)lstm_cell/(?P<part>kernel|weights|bias|biases|"
    r"projection/kernel|projection/weights)$"
)
_LSTM_PARTS = {"kernel": "W_0", "weights": "W_0", "bias": "B", "biases": "B",
               "projection/kernel": "W_P_0", "projection/weights": "W_P_0"}
_SOFTMAX = {"softmax/W": layout.SOFTMAX_WEIGHT, "softmax/b": layout.SOFTMAX_BIAS}
# Training bookkeeping and the inference graph's carried LSTM state: not weights.
_BOOKKEEPING = re.compile(r"(^|/)(global_step|train_perplexity|beta[12]_power|Variable(_\d+)?)$")


def layout_name(relative_name: str) -> Optional[str]:
    """The published layout's name of a TensorFlow variable (its name inside the biLM's
    scope), or `None` if it is none of the biLM's."""
    if relative_name in ("char_embed", "embedding"):
        return layout.CHAR_EMBEDDING if relative_name == "char_embed" else layout.WORD_EMBEDDING
    if _CNN.match(relative_name) or _HIGHWAY.match(relative_name) or _PROJECTION.match(relative_name):
        return relative_name
    if relative_name in _SOFTMAX:
        return _SOFTMAX[relative_name]
    lstm = _LSTM.match(relative_name)
    if lstm:
        layer = lstm.group("layer") or lstm.group("train_layer") or "0"
        group = layout.lstm_cell_group(int(lstm.group("direction")), int(layer))
        return f"{group}/{_LSTM_PARTS[lstm.group('part')]}"
    return None


@WeightFormat.register("tensorflow")
class TensorFlowFormat(WeightFormat):
    """A bilm-tf checkpoint or a TF-Hub ELMo module (a SavedModel's variables)."""

    expects = (
        "a bilm-tf checkpoint (its save directory with a 'checkpoint' file, a prefix such as "
        "model.ckpt-N, or its .index file) or a TF-Hub module directory (saved_model.pb or "
        "tfhub_module.pb, and variables/)"
    )

    def recognizes(self, files: ModelFiles) -> bool:
        return files.weight_path is not None and _checkpoint_prefix(files.weight_path, str(files.weight_file)) is not None

    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        assert files.weight_path is not None
        source = str(files.weight_file)
        prefix = _checkpoint_prefix(files.weight_path, source)
        assert prefix is not None
        bundle = TensorBundle(prefix, source)
        variables = _biLM_variables(bundle, source)
        arrays = {name: bundle.tensor(tf_name) for name, tf_name in variables.items()}
        if any("/RNN/MultiRNNCell/" in name for name in variables.values()):
            # bilm-tf's inference graph prepends a padding row to its embeddings; the layout
            # (and its training graph) has none.
            for name in (layout.CHAR_EMBEDDING, layout.WORD_EMBEDDING):
                if name in arrays:
                    arrays[name] = arrays[name][1:]
        _add_missing_projections(arrays)
        described_by = "the tensors' shapes"
        if options is None:
            options_path = files.options_path or _beside(files.weight_path, OPTIONS_NAME)
            if options_path is not None:
                described_by = str(files.options_file or options_path)
                options = ElmoOptions.from_local_file(options_path, described_by)
        else:
            described_by = "the options given"
        if options is None:
            options = _options_from_shapes(arrays, source)
        else:
            _refuse_unidirectional(options, source)
        options = _with_published_character_count(options)
        words = _vocabulary(files, arrays, source)
        if words is not None:
            options = _with_softmax(options, len(words))
            arrays[layout.VOCABULARY] = numpy.array(words, dtype=object)
        else:
            for name in (layout.SOFTMAX_WEIGHT, layout.SOFTMAX_BIAS):
                arrays.pop(name, None)
        _check_against_options(arrays, variables, options, described_by, source)
        mix = _aggregation(bundle)
        return BiLmWeights(options=options, arrays=arrays, source=source,
                           extras={} if mix is None else {SCALAR_MIX: mix})


def _checkpoint_prefix(path: str, source: str) -> Optional[str]:
    """The checkpoint `path` stands for, as a prefix; `None` if it is no TensorFlow checkpoint."""
    if os.path.isfile(path + INDEX_SUFFIX):
        return path
    if os.path.isfile(path) and path.endswith(INDEX_SUFFIX):
        return path[: -len(INDEX_SUFFIX)]
    if not os.path.isdir(path):
        return None
    if any(os.path.isfile(os.path.join(path, name)) for name in SAVED_MODEL_NAMES):
        variables = os.path.join(path, SAVED_MODEL_VARIABLES)
        return variables if os.path.isfile(variables + INDEX_SUFFIX) else None
    state = os.path.join(path, CHECKPOINT_STATE_NAME)
    if os.path.isfile(state):
        return _latest_checkpoint(path, state, source)
    prefixes = sorted(name[: -len(INDEX_SUFFIX)] for name in os.listdir(path) if name.endswith(INDEX_SUFFIX))
    if len(prefixes) > 1:
        raise ConfigurationError(
            f"{source} holds several TensorFlow checkpoints ({', '.join(prefixes)}) and no "
            f"'{CHECKPOINT_STATE_NAME}' file naming the latest; give the one to read "
            f"({os.path.join(source, prefixes[-1])})."
        )
    return os.path.join(path, prefixes[0]) if prefixes else None


def _latest_checkpoint(directory: str, state_path: str, source: str) -> str:
    """
    The checkpoint a `checkpoint` state file names (`model_checkpoint_path: "..."`), relative
    to its directory, or, when it names an absolute path that is not there (a checkpoint
    copied from the machine that trained it), that name in this directory.
    """
    with open(state_path, encoding="utf-8", errors="replace") as handle:
        match = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', handle.read(), re.MULTILINE)
    if match is None:
        raise ConfigurationError(
            f"{source}: its '{CHECKPOINT_STATE_NAME}' file names no model_checkpoint_path."
        )
    named = match.group(1).encode().decode("unicode_escape")
    candidates = [named if os.path.isabs(named) else os.path.join(directory, named),
                  os.path.join(directory, os.path.basename(named))]
    for candidate in candidates:
        if os.path.isfile(candidate + INDEX_SUFFIX):
            return candidate
    raise ConfigurationError(
        f"{source}: its '{CHECKPOINT_STATE_NAME}' file names the checkpoint {named}, but neither "
        f"it nor {os.path.basename(named)}{INDEX_SUFFIX} in {source} exists."
    )


def _beside(weight_path: str, name: str) -> Optional[str]:
    directory = weight_path if os.path.isdir(weight_path) else os.path.dirname(weight_path)
    path = os.path.join(directory, name)
    return path if os.path.isfile(path) else None


def _biLM_variables(bundle: TensorBundle, source: str) -> Dict[str, str]:
    """The biLM's variables by layout name -> their TensorFlow names; everything else in the
    checkpoint must be optimizer slots or bookkeeping."""
    found: Dict[str, str] = {}
    prefixes = set()
    unknown: List[str] = []
    for name in bundle.names():
        match = re.match(r"^(?P<scope>(?:[^/]+/)*?)(?P<relative>(?:char_embed|embedding|CNN.*|RNN_\d+/.*|softmax/[Wb]))$", name)
        target = layout_name(match.group("relative")) if match else None
        if target is not None:
            found[target] = name
            prefixes.add(match.group("scope"))  # type: ignore[union-attr]
        elif not any(name in mix[:2] for mix in LAYER_MIXES) and not _BOOKKEEPING.search(name):
            unknown.append(name)
    if len(prefixes) > 1:
        raise ConfigurationError(
            f"{source} holds biLM variables under several scopes ({', '.join(sorted(prefixes))}); "
            "one biLM per checkpoint is read."
        )
    known = set(found.values())
    # Optimizer slots: `<variable>/Adagrad`, `<variable>/Adam_1`, ...
    unknown = [name for name in unknown if not any(name.startswith(variable + "/") for variable in known)]
    if not found or unknown:
        shown = ", ".join(unknown[:6]) + (", ..." if len(unknown) > 6 else "")
        raise ConfigurationError(
            f"{source} is not a biLM in bilm-tf's variable layout: "
            + (f"it holds {shown}, which is none of a biLM's variables or their optimizer slots. " if unknown else
               f"it holds none of a biLM's variables (it holds {', '.join(bundle.names()[:6])} ...). ")
            + "Expected (under one scope such as lm/ or bilm/): char_embed or embedding, "
            "CNN/W_cnn_i and b_cnn_i, CNN_high_k/{W,b}_{carry,transform}, CNN_proj/{W,b}_proj, "
            "RNN_d/rnn/multi_rnn_cell/cell_l/lstm_cell/{kernel,bias,projection/kernel} (training "
            "graph) or RNN_d/RNN/MultiRNNCell/Celll/rnn/lstm_cell/... (inference graph), "
            "softmax/W and softmax/b."
        )
    return found


def _add_missing_projections(arrays: Dict[str, numpy.ndarray]) -> None:
    """bilm-tf leaves out a projection whose input is already its output's size (char CNN
    filters = projection_dim, LSTM cell = projection_dim); the layout holds one always: the
    identity, which computes the same."""
    cnn_widths = [array.shape[-1] for name, array in arrays.items() if name.startswith("CNN/W_cnn_")]
    if cnn_widths and layout.PROJECTION_WEIGHT not in arrays:
        width = sum(cnn_widths)
        arrays[layout.PROJECTION_WEIGHT] = numpy.eye(width, dtype=numpy.float32)
        arrays[layout.PROJECTION_BIAS] = numpy.zeros(width, dtype=numpy.float32)
    for name in [n for n in arrays if n.endswith("/B")]:
        group = name[: -len("/B")]
        if f"{group}/W_P_0" not in arrays:
            cell_dim = arrays[name].shape[0] // 4
            arrays[f"{group}/W_P_0"] = numpy.eye(cell_dim, dtype=numpy.float32)


def _options_from_shapes(arrays: Mapping[str, numpy.ndarray], source: str) -> ElmoOptions:
    def count(pattern: str) -> int:
        return len({re.match(pattern, name).group(1) for name in arrays if re.match(pattern, name)})  # type: ignore

    n_layers = count(r"RNN_0/RNN/MultiRNNCell/Cell(\d+)/LSTMCell/B$")
    if count(r"RNN_(\d+)/") != 2:
        _refuse_unidirectional(None, source)
    bias = arrays[layout.lstm_cell_group(0, 0) + "/B"]
    projection = arrays[layout.lstm_cell_group(0, 0) + "/W_P_0"]
    raw: Dict = {
        "lstm": {
            "dim": bias.shape[0] // 4,
            "projection_dim": projection.shape[1],
            "n_layers": n_layers,
            "cell_clip": _ASSUMED["cell_clip"],
            "proj_clip": _ASSUMED["proj_clip"],
            "use_skip_connections": _ASSUMED["use_skip_connections"],
        },
    }
    if layout.CHAR_EMBEDDING in arrays:
        filters = []
        for i in range(count(r"CNN/W_cnn_(\d+)$")):
            _, width, _, number = arrays[layout.cnn_weight(i)].shape
            filters.append([width, number])
        raw["char_cnn"] = {
            "activation": _ASSUMED["activation"],
            "embedding": {"dim": arrays[layout.CHAR_EMBEDDING].shape[1]},
            "filters": filters,
            "max_characters_per_token": _ASSUMED["max_characters_per_token"],
            "n_characters": 262,
            "n_highway": count(r"CNN_high_(\d+)/"),
        }
    else:
        raw["n_tokens_vocab"] = arrays[layout.WORD_EMBEDDING].shape[0]
        raw["share_embedding_softmax"] = layout.SOFTMAX_BIAS in arrays and layout.SOFTMAX_WEIGHT not in arrays
    logger.warning(
        "%s comes without its options: the sizes are read from its tensors, and the rest is "
        "taken to be the published ELMo's (%s). If the biLM was trained otherwise, give its "
        "options file.",
        source,
        ", ".join(f"{key} {value}" for key, value in _ASSUMED.items() if "char_cnn" in raw or key in raw["lstm"]),
    )
    return ElmoOptions.from_dict(raw, source=f"{source} (from its tensors' shapes)")


def _refuse_unidirectional(options: Optional[ElmoOptions], source: str) -> None:
    extra = {} if options is None else options.extra
    if options is None or extra.get("bidirectional") is False:
        raise ConfigurationError(
            f"{source} is a one-directional language model (bilm-tf's bidirectional: false); "
            "ELMo needs both directions (RNN_0 and RNN_1)."
        )


def _with_published_character_count(options: ElmoOptions) -> ElmoOptions:
    """bilm-tf trains with n_characters 261 and its inference reads 262 (the padding row);
    AllenNLP's options files say 262, for the same 261-row table."""
    if options.word_inputs or options.n_characters == 262:
        return options
    return _replace(options, n_characters=262)


def _with_softmax(options: ElmoOptions, n_words: int) -> ElmoOptions:
    return _replace(options, softmax_in_weights=True, n_tokens_vocab=n_words)


def _replace(options: ElmoOptions, **changes) -> ElmoOptions:
    return dataclasses.replace(options, **changes)


def _vocabulary(files: ModelFiles, arrays: Mapping[str, numpy.ndarray], source: str) -> Optional[List[str]]:
    """The softmax's words (a vocabulary file given or beside the checkpoint), checked
    against its rows; `None` (and the softmax left out) when there is no softmax or no file."""
    rows = _softmax_rows(arrays)
    word_input = layout.WORD_EMBEDDING in arrays
    path = files.vocabulary_path or (None if files.weight_path is None else
                                     next(filter(None, (_beside(files.weight_path, n) for n in VOCABULARY_NAMES)), None))
    if path is None:
        if word_input:
            raise ConfigurationError(
                f"{source} is a word-input biLM: its vocabulary file is needed (the words of "
                "its embedding rows, one per line, as bilm-tf trained it)."
            )
        if rows is not None:
            logger.warning(
                "%s holds a softmax of %d words but no vocabulary file was given (or found "
                "beside it as %s): the softmax, which only fine-tuning uses, is left out.",
                source, rows, " or ".join(VOCABULARY_NAMES),
            )
        return None
    if rows is None and not word_input:
        return None
    described = str(files.vocabulary_file or path)
    words = read_bilm_vocab_file(path)
    expected = rows if rows is not None else arrays[layout.WORD_EMBEDDING].shape[0]
    if len(words) != expected:
        raise ConfigurationError(
            f"The vocabulary {described} has {len(words)} words, but {source}'s "
            f"{'softmax' if rows is not None else 'embedding'} has {expected} rows: it is not "
            "the vocabulary this biLM was trained with."
        )
    return words


def _softmax_rows(arrays: Mapping[str, numpy.ndarray]) -> Optional[int]:
    if layout.SOFTMAX_BIAS in arrays:
        return int(arrays[layout.SOFTMAX_BIAS].shape[0])
    return None


def _check_against_options(
    arrays: Dict[str, numpy.ndarray], variables: Mapping[str, str], options: ElmoOptions, described_by: str, source: str
) -> None:
    """Every tensor the options describe is there with its shape, and nothing else."""
    expected = layout.dataset_shapes(options)
    for name, shape in expected.items():
        tf_name = variables.get(name, name)
        if name not in arrays:
            raise ConfigurationError(
                f"{source} has no variable for '{name}' (shape {shape}), which {described_by} "
                "describe: the checkpoint and the options are of different biLMs."
            )
        if name not in layout.STRING_DATASETS and tuple(arrays[name].shape) != shape:
            raise ConfigurationError(
                f"{source}: variable '{tf_name}' has shape {tuple(arrays[name].shape)}, but "
                f"{described_by} require {shape} for it: the checkpoint and the options are of "
                "different biLMs."
            )
    unexpected = sorted(set(arrays) - set(expected))
    if unexpected:
        shown = ", ".join(f"'{variables.get(name, name)}'" for name in unexpected[:5])
        raise ConfigurationError(
            f"{source} holds {shown}{', ...' if len(unexpected) > 5 else ''}, which {described_by} "
            "do not describe (more filters, highway or LSTM layers than the options?)."
        )
    for name in list(arrays):
        if name not in layout.STRING_DATASETS:
            arrays[name] = numpy.ascontiguousarray(arrays[name], dtype=numpy.float32)


def _aggregation(bundle: TensorBundle) -> Optional[Dict[str, object]]:
    """A TF-Hub module's trained layer mix (google/elmo's `aggregation/weights` and
    `aggregation/scaling`, or DeepPavlov's `aggregation/elmo_output_ELMo_W` and `_gamma`): the
    weights before their softmax, as `Elmo`'s `scalar_mix_parameters`, gamma, and whose it is."""
    for weights, gamma, made_by in LAYER_MIXES:
        if weights in bundle.entries:
            mix: Dict[str, object] = {
                "scalar_mix_parameters": [float(v) for v in numpy.ravel(bundle.tensor(weights))],
                "made_by": made_by,
            }
            if gamma in bundle.entries:
                mix["gamma"] = float(numpy.ravel(bundle.tensor(gamma))[0])
            return mix
    return None
