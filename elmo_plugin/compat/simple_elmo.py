"""
NLPL's simple_elmo API on this package, for code that used it with only its import changed:

    from elmo_plugin.compat.simple_elmo import ElmoModel     # was: from simple_elmo import ElmoModel

    model = ElmoModel()
    model.load("model_dir_or.zip")                  # any model this package reads
    vectors = model.get_elmo_vectors(sentences, layers="average")    # or "top", "all"
    averages = model.get_elmo_vector_average(sentences)

(`simple_elmo` itself is a package of its own; this module does not take over its name.)
Differences: the vectors depend on each sentence alone (`ElmoEmbedder(stateful=False)`;
simple_elmo runs TensorFlow's biLM with carried state, hence its `warmup`, which is accepted
here and changes nothing); `limit` and `full` of `load` are accepted and not used. Substitutes
(`get_elmo_substitutes`) need the trained softmax: this package's `elmo_bilm` predictor gives
them (`ElmoBiLmPredictor.substitutes`, README).
"""
from typing import List, Optional

import numpy

from elmo_plugin.inference.elmo_embedder import ElmoEmbedder

LAYERS = ("average", "top", "all")


class ElmoModel:
    """simple_elmo's `ElmoModel`: `load`, `get_elmo_vectors`, `get_elmo_vector_average`."""

    def __init__(self) -> None:
        self.embedder: Optional[ElmoEmbedder] = None
        self.batch_size = 32
        self.top = False

    def load(self, directory: str, top: bool = False, max_batch_size: int = 32, limit: int = 100,
             full: bool = False) -> str:
        """Loads a model directory or archive (an NLPL zip, the published pair's directory, ...)."""
        self.embedder = ElmoEmbedder(weight_file=directory, stateful=False)
        self.batch_size, self.top = max_batch_size, top
        return "The model is now loaded."

    @property
    def vector_size(self) -> int:
        return self._loaded().output_dim

    @property
    def n_layers(self) -> int:
        return self._loaded().num_layers

    def get_elmo_vectors(self, texts: List[List[str]], warmup: bool = True, layers: str = "average") -> numpy.ndarray:
        """`(sentences, longest, dim)` token vectors, zero-padded; `(sentences, layers, longest,
        dim)` with `layers="all"`."""
        embedder, layers = self._loaded(), self._layers(layers)
        longest = max((len(text) for text in texts), default=0)
        shape = (len(texts), embedder.num_layers, longest, embedder.output_dim) if layers == "all" else (
            len(texts), longest, embedder.output_dim)
        vectors = numpy.zeros(shape, dtype=numpy.float32)
        for row, sentence in enumerate(embedder.embed_sentences(texts, self.batch_size)):
            chosen = sentence if layers == "all" else sentence[-1] if layers == "top" else sentence.mean(axis=0)
            vectors[row, ..., : chosen.shape[-2], :] = chosen
        return vectors

    def get_elmo_vector_average(self, texts: List[List[str]], warmup: bool = True, layers: str = "average") -> numpy.ndarray:
        """One vector per sentence: its tokens' vectors summed and scaled to unit length
        (`(sentences, dim)`, or `(sentences, layers, dim)` with `layers="all"`)."""
        embedder, layers = self._loaded(), self._layers(layers)
        return numpy.stack(list(embedder.embed_sentence_vectors(texts, self.batch_size, "unit-mean", layers)))

    def _layers(self, layers: str) -> str:
        if layers not in LAYERS:
            raise ValueError(f"layers must be one of {LAYERS}, got {layers!r}")
        return "top" if self.top and layers == "average" else layers

    def _loaded(self) -> ElmoEmbedder:
        if self.embedder is None:
            raise RuntimeError("ElmoModel: call load(PATH) first")
        return self.embedder
