"""
What is written for each sentence: its biLM layers reduced as asked (all of them, the top one,
their average, or a learned mix such as a TF-Hub module's `elmo` output), as token vectors or
as one sentence vector (the mean over its tokens, optionally scaled to unit length).
"""
import json
import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import numpy
from allennlp.common.checks import ConfigurationError

OUTPUT_FORMATS = ("all", "top", "average", "mix")
SENTENCE_VECTORS = ("mean", "unit-mean")


@dataclass(frozen=True)
class LayerMix:
    """
    `gamma * sum_k softmax(weights)_k * layer_k`: AllenNLP's `ScalarMix` with fixed weights,
    and a TF-Hub ELMo module's `elmo` output (`aggregation/weights`, `aggregation/scaling`).

    # Parameters

    weights : `Tuple[float, ...]`
        One weight per biLM layer, before the softmax.
    gamma : `float`, optional (default = `1.0`)
        The scale of the mix.
    """

    weights: Tuple[float, ...]
    gamma: float = 1.0

    def __post_init__(self) -> None:
        if not self.weights or not all(math.isfinite(w) for w in (*self.weights, self.gamma)):
            raise ConfigurationError(
                f"mix: the weights and gamma must be finite numbers, got {list(self.weights)} and {self.gamma}"
            )

    @classmethod
    def parse(cls, spec: str) -> "LayerMix":
        """`"w0,w1,w2"`, `"w0,w1,w2:gamma"`, or the path of a `scalar_mix.json` (what
        `allennlp elmo-import` writes for a TF-Hub module)."""
        if os.path.isfile(spec):
            try:
                with open(spec, encoding="utf-8-sig") as handle:
                    mix = json.load(handle)
                return cls(tuple(float(w) for w in mix["scalar_mix_parameters"]), float(mix.get("gamma", 1.0)))
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigurationError(
                    f"mix: {spec} is not a scalar_mix.json (a JSON object with 'scalar_mix_parameters' "
                    f"and optionally 'gamma'): {error}"
                ) from error
        weights, _, gamma = spec.partition(":")
        try:
            return cls(tuple(float(w) for w in weights.split(",")), float(gamma) if gamma else 1.0)
        except ValueError:
            raise ConfigurationError(
                f"mix: expected comma-separated layer weights with an optional ':gamma' (e.g. "
                f"0.1,0.5,-0.3:1.25), or a scalar_mix.json file; got {spec!r}"
            ) from None

    def check(self, num_layers: int) -> None:
        if len(self.weights) != num_layers:
            raise ConfigurationError(
                f"mix: {len(self.weights)} weights for a biLM of {num_layers} layers; give one per layer"
            )

    def apply(self, layers: numpy.ndarray) -> numpy.ndarray:
        """`(num_layers, ...)` -> `(...)`, computed in float64."""
        weights = numpy.asarray(self.weights, dtype=numpy.float64)
        normalized = numpy.exp(weights - weights.max())
        normalized /= normalized.sum()
        return self.gamma * numpy.tensordot(normalized, layers.astype(numpy.float64), axes=1)


@dataclass(frozen=True)
class OutputVectors:
    """
    How a sentence's layers `(num_layers, num_tokens, dim)` become what is written.

    # Parameters

    output_format : `str`
        `"all"`, `"top"`, `"average"` or `"mix"`.
    mix : `LayerMix`, optional
        With `"mix"`.
    sentence_vectors : `str`, optional
        `"mean"`: the mean over the sentence's tokens (`<S>` and `</S>` never counted; an empty
        line's vector is zeros); `"unit-mean"`: that mean scaled to length 1 (NLPL simple_elmo's
        `get_elmo_vector_average`; a zero vector stays zero).
    """

    output_format: str = "all"
    mix: Optional[Union[LayerMix, str]] = None
    sentence_vectors: Optional[str] = None

    def __post_init__(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigurationError(f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        if isinstance(self.mix, str):
            object.__setattr__(self, "mix", LayerMix.parse(self.mix))  # frozen: parsed once, here
        if (self.output_format == "mix") != (self.mix is not None):
            raise ConfigurationError(
                "mix: give the layer weights (--mix) as the output format, instead of "
                f"--all/--top/--average (output_format='mix' with mix=...); got output_format="
                f"{self.output_format!r} and mix={self.mix!r}"
            )
        if self.sentence_vectors not in (None, *SENTENCE_VECTORS):
            raise ConfigurationError(
                f"sentence_vectors must be one of {SENTENCE_VECTORS}, got {self.sentence_vectors!r}"
            )

    def check(self, num_layers: int) -> None:
        """What can only be checked against the biLM: a mix's number of weights."""
        if isinstance(self.mix, LayerMix):
            self.mix.check(num_layers)

    def layers(self, embedding: numpy.ndarray) -> numpy.ndarray:
        """`(num_layers, tokens, dim)` -> the chosen layers: `(num_layers, tokens, dim)` for
        `"all"`, `(tokens, dim)` otherwise (any number of columns: halves too)."""
        if self.output_format == "top":
            return embedding[-1]
        if self.output_format == "average":
            return embedding.mean(axis=0)  # numpy.average divides by zero for an empty sentence
        if self.output_format == "mix":
            assert isinstance(self.mix, LayerMix)
            return self.mix.apply(embedding).astype(embedding.dtype)
        return embedding

    @property
    def token_axis(self) -> int:
        return 1 if self.output_format == "all" else 0

    def shape(self, num_layers: int, num_tokens: int, dim: int) -> Tuple[int, ...]:
        """The shape written for a sentence of `num_tokens` tokens."""
        layers = (num_layers,) if self.output_format == "all" else ()
        return (*layers, dim) if self.sentence_vectors else (*layers, num_tokens, dim)

    def token_sum(self, reduced: numpy.ndarray) -> numpy.ndarray:
        """The chosen layers summed over tokens, in float64 (for `sentence`)."""
        return reduced.astype(numpy.float64).sum(axis=self.token_axis)

    def sentence(self, token_sum: numpy.ndarray, num_tokens: int) -> numpy.ndarray:
        """The sentence vector from the tokens' float64 sum."""
        mean = token_sum / num_tokens if num_tokens else numpy.zeros_like(token_sum)
        if self.sentence_vectors == "unit-mean":
            norm = numpy.linalg.norm(mean, axis=-1, keepdims=True)
            mean = numpy.divide(mean, norm, out=numpy.zeros_like(mean), where=norm > 0)
        return mean

    def of_sentence(self, embedding: numpy.ndarray) -> numpy.ndarray:
        """What is written for a sentence whose layers are all at hand."""
        reduced = self.layers(embedding)
        if not self.sentence_vectors:
            return reduced
        return self.sentence(self.token_sum(reduced), embedding.shape[1])
