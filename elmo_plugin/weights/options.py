"""
The biLM options JSON (the `options.json` published next to every ELMo weight file).

bilm-tf wrote these files; they describe the architecture, and the HDF5 weight file has no
meaning without them. This module is the one place that reads and writes them.
"""
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import write_text_atomically
from elmo_plugin.common.text_files import TEXT_ENCODING
from elmo_plugin.weights.files import resolve_elmo_file

# ELMo's character vocabulary is fixed: 256 UTF-8 byte values and 5 special characters
# (see `elmo_plugin.data.character_mapper`). bilm-tf writes 261 or 262 in the options
# (262 counts the padding id that the PyTorch side prepends); both mean the same table.
NUM_CHARACTERS_IN_FILE = 261
_ACCEPTED_N_CHARACTERS = (261, 262)
# `char_cnn.characters`: how tokens become character ids. "bytes": ELMo's UTF-8 bytes (every
# published model; the default). "elmoformanylangs": ELMoForManyLangs' Unicode character
# vocabulary, held in the weight file (our extension of the layout, see `layout`).
BYTE_CHARACTERS = "bytes"
ELMOFORMANYLANGS_CHARACTERS = "elmoformanylangs"
CHARACTER_SETS = (BYTE_CHARACTERS, ELMOFORMANYLANGS_CHARACTERS)
_ACTIVATIONS = ("relu", "tanh")
# Keys this class models; everything else in the file is carried along in `extra`.
_KNOWN_KEYS = {
    "char_cnn": {"embedding", "filters", "n_highway", "activation", "max_characters_per_token",
                 "n_characters", "characters"},
    "word_embedding": {"dim", "n_words"},
    "lstm": {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip",
             "use_skip_connections"},
}
_KNOWN_TOP_LEVEL_KEYS = {"n_tokens_vocab", "share_embedding_softmax", "softmax_in_weights"}


@dataclass
class ElmoOptions:
    """
    The architecture of an ELMo biLM, with the meaning of bilm-tf's options JSON. With a
    `char_cnn` section the biLM reads characters (every published ELMo); without one it reads
    words through an embedding of its vocabulary (bilm-tf's token-input biLM; see
    `elmo_plugin.weights.layout` for its weight file).

    # Parameters

    char_embedding_dim : `Optional[int]`
        `char_cnn.embedding.dim`: size of each character embedding.
    filters : `List[Tuple[int, int]]`
        `char_cnn.filters`: `(width, number of filters)` per convolution.
    n_highway : `int`
        `char_cnn.n_highway`: highway layers after the convolutions.
    activation : `str`
        `char_cnn.activation`: `"relu"` or `"tanh"`, applied after max-pooling.
    max_characters_per_token : `int`
        `char_cnn.max_characters_per_token`: 50 in every published model.
    n_characters : `int`
        `char_cnn.n_characters`: 261 or 262 for ELMo's byte-level characters (the same 261-row
        table); the size of the character table for `"elmoformanylangs"` characters.
    characters : `str`
        `char_cnn.characters` (our extension): `"bytes"` (absent; every published model) or
        `"elmoformanylangs"` (ELMoForManyLangs' Unicode character vocabulary, in the weight file).
    word_dim : `Optional[int]`
        `word_embedding.dim` (our extension, with `"elmoformanylangs"` characters): a word
        embedding concatenated before the projection, as ELMoForManyLangs has.
    n_words : `Optional[int]`
        `word_embedding.n_words`: that embedding's rows.
    cell_dim : `int`
        `lstm.dim`: size of the LSTM memory cell.
    projection_dim : `int`
        `lstm.projection_dim`: size of the LSTM output and of the token representation.
    n_layers : `int`
        `lstm.n_layers`: LSTM layers per direction.
    cell_clip : `Optional[float]`
        `lstm.cell_clip`: clip value of the memory cell; absent or 0 means no clipping.
    proj_clip : `Optional[float]`
        `lstm.proj_clip`: clip value of the projected output; absent or 0 means no clipping.
    use_skip_connections : `bool`
        `lstm.use_skip_connections`: residual connections between LSTM layers.
    n_tokens_vocab : `Optional[int]`
        Top-level `n_tokens_vocab`: the vocabulary size (the rows of a word-input biLM's
        embedding; informative for a character-input one).
    share_embedding_softmax : `bool`
        Top-level `share_embedding_softmax`: a word-input biLM trained with its input
        embedding tied to the softmax (bilm-tf's option; needs word inputs).
    softmax_in_weights : `bool`
        Top-level `softmax_in_weights` (our extension): the weight file also holds the
        trained softmax and its vocabulary (`n_tokens_vocab` words), from which fine-tuning
        starts (see `layout`). The published files have none.
    extra : `Dict[str, Any]`
        Every other key of the file (training settings such as `n_epochs`), kept so that
        `to_json` writes back what was read.
    """

    cell_dim: int
    projection_dim: int
    n_layers: int
    cell_clip: Optional[float] = None
    proj_clip: Optional[float] = None
    use_skip_connections: bool = True
    # The character encoder; all None for a word-input biLM (no `char_cnn` section).
    char_embedding_dim: Optional[int] = None
    filters: Optional[List[Tuple[int, int]]] = None
    n_highway: Optional[int] = None
    activation: Optional[str] = None
    max_characters_per_token: Optional[int] = None
    n_characters: Optional[int] = None
    characters: str = BYTE_CHARACTERS
    word_dim: Optional[int] = None
    n_words: Optional[int] = None
    n_tokens_vocab: Optional[int] = None
    share_embedding_softmax: bool = False
    softmax_in_weights: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def word_inputs(self) -> bool:
        """Whether the biLM reads words (an embedding) rather than characters (a char CNN)."""
        return self.filters is None

    @property
    def n_filters(self) -> int:
        return sum(num for _, num in self.filters or [])

    @property
    def token_features(self) -> int:
        """Inputs of the projection to the LSTM: the char CNN's filters, and word vectors."""
        return self.n_filters + (self.word_dim or 0)

    @property
    def output_dim(self) -> int:
        """Size of one biLM layer's output: forward and backward halves."""
        return 2 * self.projection_dim

    @classmethod
    def from_file(cls, options_file: str) -> "ElmoOptions":
        """Reads an options JSON from a path or URL (through `cached_path`)."""
        return cls.from_local_file(resolve_elmo_file(options_file, "ELMo options file"), str(options_file))

    @classmethod
    def from_local_file(cls, path: str, source: str) -> "ElmoOptions":
        """Reads an options JSON at a local `path`; errors name `source` (what the user gave)."""
        try:
            with open(path, "r", encoding=TEXT_ENCODING) as options_handle:
                raw = json.load(options_handle)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ConfigurationError(f"ELMo options file {source} is not valid JSON: {error}") from error
        return cls.from_dict(raw, source=source)

    @classmethod
    def from_dict(cls, raw: Dict[str, Any], source: str = "<dict>") -> "ElmoOptions":
        """Validates a parsed options JSON; errors name `source` and the offending key."""
        reader = _KeyReader(raw, source)
        reader.refuse_non_finite_numbers()
        if "word_embedding" in raw and "char_cnn" not in raw:
            raise ConfigurationError(
                f"ELMo options file {source}: a word_embedding section goes with a char_cnn section "
                f"whose characters are {ELMOFORMANYLANGS_CHARACTERS!r}."
            )
        character_options = cls._character_options(reader, source) if "char_cnn" in raw else {}
        n_tokens_vocab = reader.get("n_tokens_vocab", int) if "n_tokens_vocab" in raw else None
        share_embedding_softmax = reader.get_flag("share_embedding_softmax")
        if share_embedding_softmax and character_options:
            raise ConfigurationError(
                f"ELMo options file {source}: share_embedding_softmax ties a word embedding to "
                "the softmax and needs a word-input biLM (no 'char_cnn' section)."
            )
        softmax_in_weights = reader.get_flag("softmax_in_weights")
        if softmax_in_weights and n_tokens_vocab is None:
            raise ConfigurationError(
                f"ELMo options file {source}: softmax_in_weights needs n_tokens_vocab, the "
                "number of words of the softmax."
            )
        extra: Dict[str, Any] = {}
        for section, value in raw.items():
            if section in _KNOWN_TOP_LEVEL_KEYS:
                continue
            if section in _KNOWN_KEYS and isinstance(value, dict):
                rest = {k: v for k, v in value.items() if k not in _KNOWN_KEYS[section]}
                if rest:
                    extra[section] = rest
            else:
                extra[section] = value
        return cls(
            cell_dim=reader.get("lstm.dim", int),
            projection_dim=reader.get("lstm.projection_dim", int),
            n_layers=reader.get("lstm.n_layers", int),
            cell_clip=reader.get_optional_clip("lstm.cell_clip"),
            proj_clip=reader.get_optional_clip("lstm.proj_clip"),
            use_skip_connections=reader.get_flag("lstm.use_skip_connections"),
            n_tokens_vocab=n_tokens_vocab,
            share_embedding_softmax=share_embedding_softmax,
            softmax_in_weights=softmax_in_weights,
            extra=extra,
            **character_options,
        )

    @staticmethod
    def _character_options(reader: "_KeyReader", source: str) -> Dict[str, Any]:
        filters_raw = reader.get("char_cnn.filters", list)
        filters: List[Tuple[int, int]] = []
        for position, pair in enumerate(filters_raw):
            if (
                not isinstance(pair, (list, tuple))
                or len(pair) != 2
                or not all(isinstance(v, int) and v > 0 for v in pair)
            ):
                raise ConfigurationError(
                    f"ELMo options file {source}: char_cnn.filters[{position}] must be "
                    f"[width, number_of_filters] with positive integers, got {pair!r}"
                )
            filters.append((pair[0], pair[1]))
        if not filters:
            raise ConfigurationError(
                f"ELMo options file {source}: char_cnn.filters must list at least one filter"
            )
        characters = BYTE_CHARACTERS
        if reader.has("char_cnn.characters"):
            characters = reader.get("char_cnn.characters", str)
        if characters not in CHARACTER_SETS:
            raise ConfigurationError(
                f"ELMo options file {source}: char_cnn.characters must be one of "
                f"{', '.join(CHARACTER_SETS)}, got {characters!r}"
            )
        activation = reader.get("char_cnn.activation", str)
        if activation not in _ACTIVATIONS:
            raise ConfigurationError(
                f"ELMo options file {source}: char_cnn.activation must be one of "
                f"{_ACTIVATIONS}, got {activation!r}"
            )
        n_characters = reader.get("char_cnn.n_characters", int)
        if characters == BYTE_CHARACTERS and n_characters not in _ACCEPTED_N_CHARACTERS:
            raise ConfigurationError(
                f"ELMo options file {source}: char_cnn.n_characters must be 261 or 262 "
                f"(ELMo's fixed byte-level character set), got {n_characters}"
            )
        return dict(
            char_embedding_dim=reader.get("char_cnn.embedding.dim", int),
            filters=filters,
            n_highway=reader.get("char_cnn.n_highway", int, minimum=0),
            activation=activation,
            max_characters_per_token=reader.get("char_cnn.max_characters_per_token", int),
            n_characters=n_characters,
            characters=characters,
            **ElmoOptions._word_embedding_options(reader, source, characters),
        )

    @staticmethod
    def _word_embedding_options(reader: "_KeyReader", source: str, characters: str) -> Dict[str, Any]:
        if not reader.has("word_embedding"):
            return {}
        if characters != ELMOFORMANYLANGS_CHARACTERS:
            raise ConfigurationError(
                f"ELMo options file {source}: a word_embedding section goes with "
                f"char_cnn.characters {ELMOFORMANYLANGS_CHARACTERS!r}."
            )
        return dict(
            word_dim=reader.get("word_embedding.dim", int),
            n_words=reader.get("word_embedding.n_words", int),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The options JSON content, in bilm-tf's layout, with the extra keys merged back."""
        lstm: Dict[str, Any] = {
            "dim": self.cell_dim,
            "projection_dim": self.projection_dim,
            "n_layers": self.n_layers,
            "use_skip_connections": self.use_skip_connections,
        }
        if self.cell_clip is not None:
            lstm["cell_clip"] = self.cell_clip
        if self.proj_clip is not None:
            lstm["proj_clip"] = self.proj_clip
        result: Dict[str, Any] = {}
        for section, value in self.extra.items():
            result[section] = dict(value) if isinstance(value, dict) else value
        if not self.word_inputs:
            result.setdefault("char_cnn", {}).update(
                {
                    "embedding": {"dim": self.char_embedding_dim},
                    "filters": [list(pair) for pair in self.filters],  # type: ignore
                    "n_highway": self.n_highway,
                    "activation": self.activation,
                    "max_characters_per_token": self.max_characters_per_token,
                    "n_characters": self.n_characters,
                }
            )
            if self.characters != BYTE_CHARACTERS:
                result["char_cnn"]["characters"] = self.characters
        if self.word_dim is not None:
            result["word_embedding"] = {"dim": self.word_dim, "n_words": self.n_words}
        result.setdefault("lstm", {}).update(lstm)
        if self.n_tokens_vocab is not None:
            result["n_tokens_vocab"] = self.n_tokens_vocab
        if self.word_inputs:
            result["share_embedding_softmax"] = self.share_embedding_softmax
        if self.softmax_in_weights:
            result["softmax_in_weights"] = True
        return result

    def to_file(self, path: str) -> None:
        """Writes the options JSON; the file appears under `path` only once complete."""
        write_text_atomically(path, json.dumps(self.to_dict(), indent=2) + "\n")


class _KeyReader:
    """Reads dotted keys from the raw JSON and names the file and key in every error."""

    def __init__(self, raw: Any, source: str) -> None:
        if not isinstance(raw, dict):
            raise ConfigurationError(
                f"ELMo options file {source} must hold a JSON object, got {type(raw).__name__}"
            )
        self._raw = raw
        self._source = source

    def _lookup(self, dotted_key: str) -> Tuple[bool, Any]:
        node: Any = self._raw
        for part in dotted_key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False, None
            node = node[part]
        return True, node

    def get(self, dotted_key: str, expected_type: type, minimum: int = 1) -> Any:
        found, value = self._lookup(dotted_key)
        if not found:
            raise ConfigurationError(
                f"ELMo options file {self._source} is missing the key '{dotted_key}'"
            )
        if expected_type is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigurationError(
                    f"ELMo options file {self._source}: '{dotted_key}' must be an integer "
                    f">= {minimum}, got {value!r}"
                )
        elif not isinstance(value, expected_type):
            raise ConfigurationError(
                f"ELMo options file {self._source}: '{dotted_key}' must be a "
                f"{expected_type.__name__}, got {value!r}"
            )
        return value

    def refuse_non_finite_numbers(self) -> None:
        """JSON parsers accept NaN and Infinity; no option may be one (a NaN clip passes every
        comparison and makes every vector NaN)."""

        def visit(node: Any, key: str) -> None:
            if isinstance(node, float) and not math.isfinite(node):
                raise ConfigurationError(
                    f"ELMo options file {self._source}: '{key}' must be a finite number, got {node!r}"
                )
            children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for child_key, child in children:
                visit(child, f"{key}.{child_key}" if key else str(child_key))

        visit(self._raw, "")

    def has(self, dotted_key: str) -> bool:
        return self._lookup(dotted_key)[0]

    def get_flag(self, dotted_key: str) -> bool:
        # bilm-tf reads this flag with dict.get: absent means False.
        found, value = self._lookup(dotted_key)
        if found and not isinstance(value, bool):
            raise ConfigurationError(
                f"ELMo options file {self._source}: '{dotted_key}' must be true or false, "
                f"got {value!r}"
            )
        return bool(found and value)

    def get_optional_clip(self, dotted_key: str) -> Optional[float]:
        found, value = self._lookup(dotted_key)
        if not found or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigurationError(
                f"ELMo options file {self._source}: '{dotted_key}' must be a non-negative "
                f"number, got {value!r}"
            )
        # bilm-tf and AllenNLP both treat a clip value of 0 as "no clipping".
        return float(value) if value else None
