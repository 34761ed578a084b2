"""
ELMoForManyLangs model directories (HIT-SCIR's pretrained ELMo for dozens of languages), as
its `Embedder(model_dir)` reads them and as the NLPL repository distributes them (zips, with a
`meta.json`):

| file | what |
|---|---|
| `config.json` | training settings; `config_path` names the architecture JSON |
| the architecture JSON | `encoder` (`elmo`: dim, projection_dim, n_layers, clips) and `token_embedder` (`cnn`: filters, n_highway, char_dim, word_dim, ...); in the directory, or one of the two that ELMoForManyLangs ships in its package, by name |
| `char.dic`, `word.dic` | one entry per line, `entry<TAB>id` (a line with only an id is U+3000, as ELMoForManyLangs reads it) |
| `token_embedder.pkl`, `encoder.pkl` | PyTorch state dicts, read with `torch.load(weights_only=True)`: tensors only, no code |

Read into the layout's ELMoForManyLangs extension (`layout`): the tensors are PyTorch's, so the
conversions are `layout`'s functions, the same the network blocks use.
"""
import json
import os
import pickle
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.text_files import TEXT_ENCODING
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats.base import BiLmWeights, ModelFiles, WeightFormat
from elmo_plugin.weights.options import ELMOFORMANYLANGS_CHARACTERS, ElmoOptions

CONFIG_NAME = "config.json"
STATE_DICTS = ("token_embedder.pkl", "encoder.pkl")

# ELMoForManyLangs ships two architecture files in its package (with the same content) and its
# published models' config.json name them without including them.
_PACKAGED_ARCHITECTURE: Dict[str, Any] = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096,
                "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu",
                       "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                       "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50},
}
PACKAGED_ARCHITECTURES = {
    "cnn_50_100_512_4096_sample.json": _PACKAGED_ARCHITECTURE,
    "cnn_0_100_512_4096_sample.json": _PACKAGED_ARCHITECTURE,
}


@WeightFormat.register("elmoformanylangs")
class ElmoForManyLangsFormat(WeightFormat):
    """An ELMoForManyLangs model directory (or archive), given as either file or both."""

    expects = (
        f"a directory or archive with {CONFIG_NAME}, char.dic, {' and '.join(STATE_DICTS)} "
        "(ELMoForManyLangs)"
    )

    def recognizes(self, files: ModelFiles) -> bool:
        directory = files.model_directory()
        return directory is not None and all(
            os.path.isfile(os.path.join(directory, name)) for name in (CONFIG_NAME, *STATE_DICTS)
        )

    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        directory = files.model_directory()
        source = files.weight_file or files.options_file
        architecture, architecture_name = _architecture(directory, source)
        reader = _Architecture(architecture, f"{source}: {architecture_name}")
        characters = _read_vocabulary(os.path.join(directory, "char.dic"), f"{source}: char.dic")
        word_dim = reader.integer("token_embedder.word_dim", minimum=0)
        words = None
        if word_dim > 0:
            words = _read_vocabulary(os.path.join(directory, "word.dic"), f"{source}: word.dic")
        options = ElmoOptions.from_dict(
            {
                "lstm": {
                    "dim": reader.integer("encoder.dim"),
                    "projection_dim": reader.integer("encoder.projection_dim"),
                    "n_layers": reader.integer("encoder.n_layers"),
                    "cell_clip": reader.get("encoder.cell_clip"),
                    "proj_clip": reader.get("encoder.proj_clip"),
                    # ELMoForManyLangs' ElmobiLm adds every layer's input above the first.
                    "use_skip_connections": True,
                },
                "char_cnn": {
                    "activation": reader.get("token_embedder.activation"),
                    "filters": reader.get("token_embedder.filters"),
                    "n_highway": reader.integer("token_embedder.n_highway", minimum=0),
                    "embedding": {"dim": reader.integer("token_embedder.char_dim")},
                    "max_characters_per_token": reader.integer("token_embedder.max_characters_per_token", minimum=3),
                    "n_characters": len(characters),
                    "characters": ELMOFORMANYLANGS_CHARACTERS,
                },
                **({"word_embedding": {"dim": word_dim, "n_words": len(words)}} if words else {}),
            },
            source=f"{source}: {architecture_name}",
        )
        tensors = {}
        for name in STATE_DICTS:
            tensors.update({f"{name}:{key}": value for key, value in _load_state_dict(directory, name, source).items()})
        _check_tensors(tensors, options, source, architecture_name)
        arrays = _layout_arrays(tensors, options)
        arrays[layout.CHAR_VOCABULARY] = numpy.array(characters, dtype=object)
        if words is not None:
            arrays[layout.WORD_VOCABULARY] = numpy.array(words, dtype=object)
        return BiLmWeights(options=options, arrays=arrays, source=str(source))


def _architecture(directory: str, source: str) -> Tuple[Dict[str, Any], str]:
    """The architecture JSON `config.json` names, and the name to use in messages."""
    config_path = os.path.join(directory, CONFIG_NAME)
    try:
        with open(config_path, encoding=TEXT_ENCODING) as handle:
            config = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigurationError(f"{source}: {CONFIG_NAME} is not valid JSON: {error}") from error
    named = config.get("config_path") if isinstance(config, dict) else None
    if not isinstance(named, str):
        raise ConfigurationError(
            f"{source}: {CONFIG_NAME} has no 'config_path' naming the architecture JSON (got {named!r})."
        )
    # ELMoForManyLangs' own search: the path, the file name in the model directory, its package.
    for candidate in (os.path.join(directory, named), os.path.join(directory, os.path.basename(named))):
        if os.path.isfile(candidate):
            try:
                with open(candidate, encoding=TEXT_ENCODING) as handle:
                    return json.load(handle), os.path.basename(candidate)
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ConfigurationError(f"{source}: {os.path.basename(candidate)} is not valid JSON: {error}") from error
    packaged = PACKAGED_ARCHITECTURES.get(os.path.basename(named))
    if packaged is None:
        raise ConfigurationError(
            f"{source}: {CONFIG_NAME}'s 'config_path' is {named!r}, which is neither in the model "
            f"directory nor one of ELMoForManyLangs' packaged architectures ({', '.join(PACKAGED_ARCHITECTURES)})."
        )
    return packaged, os.path.basename(named)


class _Architecture:
    """Reads dotted keys of an ELMoForManyLangs architecture JSON, naming file and key in errors."""

    def __init__(self, raw: Any, source: str) -> None:
        self._raw, self._source = raw, source
        if self.get("encoder.name") != "elmo" or self.get("token_embedder.name") != "cnn":
            raise ConfigurationError(
                f"{source}: only ELMoForManyLangs' ELMo models load here (encoder.name 'elmo', "
                f"token_embedder.name 'cnn'); this one has {self.get('encoder.name')!r} and "
                f"{self.get('token_embedder.name')!r}."
            )

    def get(self, dotted_key: str) -> Any:
        node = self._raw
        for part in dotted_key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigurationError(f"{self._source} is missing the key '{dotted_key}'.")
            node = node[part]
        return node

    def integer(self, dotted_key: str, minimum: int = 1) -> int:
        value = self.get(dotted_key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigurationError(
                f"{self._source}: '{dotted_key}' must be an integer >= {minimum}, got {value!r}."
            )
        return value


def _read_vocabulary(path: str, source: str) -> List[str]:
    """
    `char.dic` or `word.dic` as ELMoForManyLangs reads it (each line stripped and split at tabs,
    a line with only an id standing for U+3000, a later line for the same entry winning), as
    the list of entries in id order. Ids must number the entries 0, 1, ... once each.
    """
    if not os.path.isfile(path):
        raise ConfigurationError(f"{source} is missing; the model's architecture needs it.")
    try:
        with open(path, encoding=TEXT_ENCODING, newline="") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as error:
        raise ConfigurationError(f"{source} is not UTF-8 text: {error}") from error
    ids: Dict[str, Tuple[int, int]] = {}
    for line_number, line in enumerate(lines, start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        entry_id = _integer(fields[1]) if len(fields) == 2 else None
        if entry_id is None:
            raise ConfigurationError(
                f"{source}, line {line_number}: expected 'entry<TAB>id' with an integer id, got {line!r}."
            )
        ids[fields[0]] = (entry_id, line_number)
    by_id: Dict[int, Tuple[str, int]] = {}
    for entry, (entry_id, line_number) in ids.items():
        if entry_id in by_id:
            raise ConfigurationError(
                f"{source}, line {line_number}: id {entry_id} is already the id of "
                f"{by_id[entry_id][0]!r} (line {by_id[entry_id][1]})."
            )
        by_id[entry_id] = (entry, line_number)
    missing = sorted(set(range(len(by_id))) - set(by_id))
    if missing:
        beyond = max(by_id)
        raise ConfigurationError(
            f"{source}, line {by_id[beyond][1]}: id {beyond} is beyond the {len(by_id)} entries "
            f"(no entry has id {missing[0]})."
        )
    return [by_id[entry_id][0] for entry_id in range(len(by_id))]


def _integer(text: str) -> Optional[int]:
    """`text` as a non-negative integer in ASCII digits (`str.isdigit` also accepts '²')."""
    return int(text) if text.isascii() and text.isdigit() else None


def _load_state_dict(directory: str, name: str, source: str) -> Mapping[str, torch.Tensor]:
    path = os.path.join(directory, name)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as error:
        raise ConfigurationError(
            f"{source}: {name} cannot be read as a PyTorch state dict of tensors (it is loaded with "
            f"weights_only=True, which runs no code from the file): {error}"
        ) from error
    if not isinstance(state, Mapping) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise ConfigurationError(f"{source}: {name} does not hold a state dict of tensors.")
    return state


def _expected_shapes(options: ElmoOptions) -> Dict[str, Tuple[int, ...]]:
    """Every tensor of the two state dicts, as `file:key`, with its shape for `options`."""
    token, encoder = (f"{name}:" for name in STATE_DICTS)
    shapes: Dict[str, Tuple[int, ...]] = {}
    if options.word_dim:
        shapes[token + "word_emb_layer.embedding.weight"] = (options.n_words, options.word_dim)
    shapes[token + "char_emb_layer.embedding.weight"] = (options.n_characters, options.char_embedding_dim)
    for i, (width, number) in enumerate(options.filters):
        shapes[token + f"convolutions.{i}.weight"] = (number, options.char_embedding_dim, width)
        shapes[token + f"convolutions.{i}.bias"] = (number,)
    n = options.n_filters
    for k in range(options.n_highway):
        shapes[token + f"highways._layers.{k}.weight"] = (2 * n, n)
        shapes[token + f"highways._layers.{k}.bias"] = (2 * n,)
    shapes[token + "projection.weight"] = (options.projection_dim, options.token_features)
    shapes[token + "projection.bias"] = (options.projection_dim,)
    p, c = options.projection_dim, options.cell_dim
    for direction in layout.DIRECTIONS:
        for l in range(options.n_layers):
            prefix = f"{encoder}{direction}_layer_{l}."
            shapes[prefix + "input_linearity.weight"] = (4 * c, p)
            shapes[prefix + "state_linearity.weight"] = (4 * c, p)
            shapes[prefix + "state_linearity.bias"] = (4 * c,)
            shapes[prefix + "state_projection.weight"] = (p, c)
    return shapes


def _check_tensors(tensors: Mapping[str, torch.Tensor], options: ElmoOptions, source: str, architecture: str) -> None:
    expected = _expected_shapes(options)
    for key, shape in expected.items():
        file_name, tensor_name = key.split(":")
        if key not in tensors:
            raise ConfigurationError(
                f"{source}: {file_name} has no tensor '{tensor_name}' (expected shape {shape} for {architecture})."
            )
        if tuple(tensors[key].shape) != shape:
            raise ConfigurationError(
                f"{source}: {file_name}'s tensor '{tensor_name}' has shape {tuple(tensors[key].shape)}, but "
                f"{architecture} and the vocabularies require {shape}."
            )
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        file_name, tensor_name = unexpected[0].split(":")
        raise ConfigurationError(
            f"{source}: {file_name} holds '{tensor_name}'{' and more' if len(unexpected) > 1 else ''}, "
            f"which {architecture} does not describe."
        )


def _layout_arrays(tensors: Mapping[str, torch.Tensor], options: ElmoOptions) -> Dict[str, numpy.ndarray]:
    def get(key: str) -> numpy.ndarray:
        return tensors[key].detach().to(torch.float32).numpy()

    token, encoder = (f"{name}:" for name in STATE_DICTS)
    arrays = {layout.CHAR_EMBEDDING: get(token + "char_emb_layer.embedding.weight")}
    if options.word_dim:
        arrays[layout.WORD_VECTORS] = get(token + "word_emb_layer.embedding.weight")
    for i in range(len(options.filters)):
        arrays[layout.cnn_weight(i)] = layout.cnn_kernel(get(token + f"convolutions.{i}.weight"))
        arrays[layout.cnn_bias(i)] = get(token + f"convolutions.{i}.bias")
    for k in range(options.n_highway):
        arrays.update(
            layout.highway_datasets(k, get(token + f"highways._layers.{k}.weight"), get(token + f"highways._layers.{k}.bias"))
        )
    arrays[layout.PROJECTION_WEIGHT] = get(token + "projection.weight").T
    arrays[layout.PROJECTION_BIAS] = get(token + "projection.bias")
    for direction_index, direction in enumerate(layout.DIRECTIONS):
        for l in range(options.n_layers):
            prefix = f"{encoder}{direction}_layer_{l}."
            arrays.update(
                layout.lstm_cell_datasets(
                    layout.lstm_cell_group(direction_index, l),
                    get(prefix + "input_linearity.weight"),
                    get(prefix + "state_linearity.weight"),
                    get(prefix + "state_linearity.bias"),
                    get(prefix + "state_projection.weight"),
                )
            )
    return {name: numpy.ascontiguousarray(array) for name, array in arrays.items()}
