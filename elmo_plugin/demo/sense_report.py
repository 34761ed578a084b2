"""
How well each biLM layer tells the senses of an ambiguous word apart: cosine similarities of
the word's vectors within a sense and across senses, and a 2-D picture of them.
"""
import itertools
from dataclasses import dataclass
from typing import Dict, List, Sequence

import h5py
import numpy

from elmo_plugin.demo.corpus import GeneratedSentence


@dataclass
class SenseSimilarity:
    """Mean cosine similarity of one word's vectors in one layer."""

    word: str
    layer: int
    within_sense: float
    across_senses: float

    @property
    def separation(self) -> float:
        return self.within_sense - self.across_senses


def read_word_vectors(
    hdf5_path: str, sentences: Sequence[GeneratedSentence]
) -> List[numpy.ndarray]:
    """
    For each sentence (line i of the file `allennlp elmo --all` embedded), the vectors of its
    ambiguous word in every layer, `(num_layers, dim)`.
    """
    vectors = []
    with h5py.File(hdf5_path, "r") as handle:
        for index, sentence in enumerate(sentences):
            layers = handle[str(index)]
            if layers.shape[1] != len(sentence.tokens):
                raise ValueError(
                    f"{hdf5_path}: sentence {index} has {layers.shape[1]} vectors for "
                    f"{len(sentence.tokens)} tokens; was it embedded from another file?"
                )
            vectors.append(numpy.asarray(layers[:, sentence.position, :]))
    return vectors


def _unit(vectors: numpy.ndarray) -> numpy.ndarray:
    norms = numpy.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / numpy.maximum(norms, 1e-12)


def sense_similarities(
    sentences: Sequence[GeneratedSentence], vectors: Sequence[numpy.ndarray]
) -> List[SenseSimilarity]:
    """
    Per ambiguous word and layer: the mean cosine over pairs of occurrences with the same
    sense (each pair once, no occurrence with itself) and over pairs with different senses.
    """
    results = []
    words = sorted({s.word for s in sentences if s.word is not None})
    num_layers = vectors[0].shape[0]
    for word in words:
        indices = [i for i, s in enumerate(sentences) if s.word == word]
        senses = [sentences[i].sense for i in indices]
        for layer in range(num_layers):
            unit = _unit(numpy.stack([vectors[i][layer] for i in indices]))
            cosines = unit @ unit.T
            within, across = [], []
            for a, b in itertools.combinations(range(len(indices)), 2):
                (within if senses[a] == senses[b] else across).append(cosines[a, b])
            if not within or not across:
                raise ValueError(f"'{word}' needs two occurrences of a sense and two senses.")
            results.append(
                SenseSimilarity(word, layer, float(numpy.mean(within)), float(numpy.mean(across)))
            )
    return results


def format_table(similarities: Sequence[SenseSimilarity]) -> str:
    """A text table: one row per word, within / across per layer."""
    layers = sorted({s.layer for s in similarities})
    by_key: Dict[tuple, SenseSimilarity] = {(s.word, s.layer): s for s in similarities}
    header = "word      " + "".join(f"| layer {layer}: within across " for layer in layers)
    lines = [header, "-" * len(header)]
    for word in sorted({s.word for s in similarities}):
        cells = "".join(
            f"|        {by_key[word, layer].within_sense:6.3f} {by_key[word, layer].across_senses:6.3f} "
            for layer in layers
        )
        lines.append(f"{word:<10}{cells}")
    return "\n".join(lines)


def plot_senses(
    sentences: Sequence[GeneratedSentence],
    vectors: Sequence[numpy.ndarray],
    path: str,
    layers: Sequence[int] = (0, 2),
) -> None:
    """
    A PNG with one row per ambiguous word and one column per layer: the word's vectors
    projected on their first two principal components, coloured by sense.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as pyplot

    words = sorted({s.word for s in sentences if s.word is not None})
    figure, axes = pyplot.subplots(
        len(words), len(layers), figsize=(4 * len(layers), 3.2 * len(words)), squeeze=False
    )
    for row, word in enumerate(words):
        indices = [i for i, s in enumerate(sentences) if s.word == word]
        senses = sorted({sentences[i].sense for i in indices})
        for column, layer in enumerate(layers):
            points = numpy.stack([vectors[i][layer] for i in indices])
            centred = points - points.mean(axis=0)
            if numpy.abs(centred).max() <= 1e-5 * numpy.abs(points).max():
                # One vector (layer 0), up to float rounding that PCA would blow up.
                projected = numpy.zeros((len(points), 2))
            else:
                _, _, components = numpy.linalg.svd(centred, full_matrices=False)
                projected = centred @ components[:2].T
            axis = axes[row][column]
            for sense in senses:
                mask = numpy.array([sentences[i].sense == sense for i in indices])
                axis.scatter(projected[mask, 0], projected[mask, 1], s=12, label=sense, alpha=0.7)
            kind = "context-free" if layer == 0 else "contextual"
            axis.set_title(f"'{word}', layer {layer} ({kind})", fontsize=10)
            axis.set_xticks([])
            axis.set_yticks([])
            axis.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
