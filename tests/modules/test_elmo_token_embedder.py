import torch
from allennlp.common import Params
from allennlp.common.testing import AllenNlpTestCase
from allennlp.data import Instance, Token, TokenIndexer, Vocabulary
from allennlp.data.batch import Batch
from allennlp.data.fields import TextField
from allennlp.modules.token_embedders import ElmoTokenEmbedder as AllenNlpElmoTokenEmbedder
from allennlp.modules.token_embedders import TokenEmbedder

import elmo_plugin  # noqa: F401
from elmo_plugin import ElmoTokenEmbedder
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE
from tests.modules.oracle import FLOAT64_TOLERANCE


def embedder_params(**extra) -> Params:
    return Params({"type": "elmo_token_embedder", "options_file": ELMO_OPTIONS_FILE,
                   "weight_file": ELMO_WEIGHT_FILE, "dropout": 0.0, **extra})


def tensors_for(sentences, indexer_params, vocab=None):
    indexer = TokenIndexer.from_params(Params(dict(indexer_params)))
    instances = [Instance({"tokens": TextField([Token(t) for t in s], {"elmo": indexer})}) for s in sentences]
    vocab = vocab or Vocabulary.from_instances(instances)
    batch = Batch(instances)
    batch.index_instances(vocab)
    return batch.as_tensor_dict()["tokens"]["elmo"], vocab


class TestElmoTokenEmbedder(AllenNlpTestCase):
    def test_registry_resolves_to_ours(self):
        assert TokenEmbedder.by_name("elmo_token_embedder") is ElmoTokenEmbedder
        assert isinstance(TokenEmbedder.from_params(embedder_params()), ElmoTokenEmbedder)

    def test_equals_allennlp_with_projection(self):
        inputs, _ = tensors_for([["The", "cat"], ["sat", "on", "it", "."]], {"type": "elmo_characters"})
        torch.manual_seed(3)
        ours = ElmoTokenEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, dropout=0.0, projection_dim=7)
        theirs = AllenNlpElmoTokenEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, dropout=0.0, projection_dim=7)
        theirs.load_state_dict(ours.state_dict())  # same projection and mix weights
        ours, theirs = ours.double(), theirs.double()
        for _ in range(2):  # carried state across two batches
            expected = theirs(**inputs)
            actual = ours(**inputs)
            assert actual.shape == (2, 4, 7) and ours.get_output_dim() == 7
            assert (actual - expected).abs().max() <= FLOAT64_TOLERANCE

    def test_namespace_to_cache_uses_word_ids(self):
        sentences = [["The", "cat", "sat"], ["The", "dog"]]
        indexer = {"type": "elmo_characters", "cache_namespace": "elmo_words"}
        inputs, vocab = tensors_for(sentences, indexer)
        assert set(inputs) == {"elmo_tokens", "word_inputs"}
        cached = TokenEmbedder.from_params(
            embedder_params(namespace_to_cache="elmo_words", stateful=False), vocab=vocab
        )
        plain = TokenEmbedder.from_params(embedder_params(stateful=False))
        plain.load_state_dict(cached.state_dict(), strict=False)
        torch.testing.assert_close(cached(**inputs), plain(inputs["elmo_tokens"]), rtol=0, atol=1e-6)
        # Unknown words (id 1, "@@UNKNOWN@@") are embedded as that string, as in AllenNLP.
        unknown_inputs, _ = tensors_for([["zebra"]], indexer, vocab)
        assert unknown_inputs["word_inputs"].tolist() == [[1]]
        assert cached(**unknown_inputs).shape == (1, 1, 32)


    def test_requires_grad_decides_whether_the_bilm_gets_gradients(self):
        char_ids = torch.randint(0, 262, (3, 4, 50), generator=torch.Generator().manual_seed(0))
        for requires_grad in (True, False):
            embedder = ElmoTokenEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, requires_grad=requires_grad)
            embedder(char_ids).sum().backward()
            gradients = [p.grad for name, p in embedder.named_parameters() if "_elmo_lstm" in name]
            assert gradients and all((g is not None) == requires_grad for g in gradients)

    def test_projection_and_more_leading_dimensions(self):
        embedder = TokenEmbedder.from_params(Params({
            "type": "elmo_token_embedder", "options_file": ELMO_OPTIONS_FILE,
            "weight_file": ELMO_WEIGHT_FILE, "projection_dim": 20}))
        assert embedder.get_output_dim() == 20
        word = [7, 6, 5, 4] + [0] * 46
        assert embedder(torch.tensor([[word, word]])).shape == (1, 2, 20)
        assert embedder(torch.tensor([[[word]]])).shape == (1, 1, 1, 20)
