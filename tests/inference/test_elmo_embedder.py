import types

import numpy
from allennlp.common.testing import AllenNlpTestCase

from elmo_plugin import ElmoEmbedder
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


class TestElmoEmbedder(AllenNlpTestCase):
    def setup_method(self):
        super().setup_method()
        self.embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)

    def test_batch_to_embeddings(self):
        activations, mask = self.embedder.batch_to_embeddings([["a", "b", "c"], ["d"]])
        assert activations.shape == (2, 3, 3, 32)
        assert mask.tolist() == [[True, True, True], [True, False, False]]

    def test_embed_sentence_and_batch(self):
        sentence = ["The", "bats", "hang", "upside", "down"]
        alone = self.embedder.embed_sentence(sentence)
        assert alone.shape == (3, 5, 32) and alone.dtype == numpy.float32
        batch = self.embedder.embed_batch([["x"], sentence, []])
        assert [e.shape for e in batch] == [(3, 1, 32), (3, 5, 32), (3, 0, 32)]
        numpy.testing.assert_allclose(batch[1], alone, rtol=0, atol=1e-6)
        assert [e.shape for e in self.embedder.embed_batch([[]])] == [(3, 0, 32)]

    def test_embed_sentences_is_lazy_and_ordered(self):
        sentences = [["s"] * n for n in (3, 1, 4, 2, 5)]
        result = self.embedder.embed_sentences(iter(sentences), batch_size=2)
        assert isinstance(result, types.GeneratorType)
        assert [e.shape[1] for e in result] == [3, 1, 4, 2, 5]
