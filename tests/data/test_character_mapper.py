import torch
from allennlp.common.testing import AllenNlpTestCase
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers.elmo_indexer import (
    ELMoCharacterMapper as AllenNlpCharacterMapper,
    ELMoTokenCharactersIndexer as AllenNlpIndexer,
)
from allennlp.modules.elmo import batch_to_ids as allennlp_batch_to_ids

from elmo_plugin import ElmoCharacterMapper, ElmoTokenCharactersIndexer, batch_to_ids

HOSTILE_TOKENS = [
    "plain",
    "über",  # 2-byte UTF-8
    "東京",  # 3-byte UTF-8
    "🙂x",  # 4-byte UTF-8
    "a" * 200,  # far beyond 48 bytes
    "é" * 30,  # 60 bytes: truncation splits a multi-byte character
    "<S>",
    "</S>",
    "with space",
    "",
    "\ud800",  # lone surrogate: no UTF-8 encoding
    "\t\n",
]


class TestElmoCharacterMapper(AllenNlpTestCase):
    def test_character_ids_equal_allennlp_for_hostile_tokens(self):
        ours, theirs = ElmoCharacterMapper(), AllenNlpCharacterMapper()
        for token in HOSTILE_TOKENS:
            assert ours.convert_word_to_char_ids(token) == theirs.convert_word_to_char_ids(token), token

    def test_layout_of_a_token(self):
        ids = ElmoCharacterMapper().convert_word_to_char_ids("ab")
        assert len(ids) == 50
        assert ids[:4] == [259, ord("a") + 1, ord("b") + 1, 260]
        assert set(ids[4:]) == {261}

    def test_long_tokens_keep_48_bytes(self):
        ids = ElmoCharacterMapper().convert_word_to_char_ids("a" * 200)
        assert ids[1:49] == [ord("a") + 1] * 48
        assert ids[49] == 260

    def test_tokens_to_add(self):
        mapper = ElmoCharacterMapper(tokens_to_add={"<mask>": 261})
        assert mapper.convert_word_to_char_ids("<mask>")[:3] == [259, 262, 260]
        theirs = AllenNlpCharacterMapper(tokens_to_add={"<mask>": 261})
        assert mapper.convert_word_to_char_ids("<mask>") == theirs.convert_word_to_char_ids("<mask>")


class TestBatchToIds(AllenNlpTestCase):
    def test_equals_allennlp(self):
        batch = [HOSTILE_TOKENS, [], ["one"], HOSTILE_TOKENS[:3]]
        assert torch.equal(batch_to_ids(batch), allennlp_batch_to_ids(batch))

    def test_empty_sentence_is_all_padding(self):
        ids = batch_to_ids([["a", "b"], []])
        assert ids.shape == (2, 2, 50)
        assert ids[1].sum() == 0

    def test_empty_batch(self):
        assert batch_to_ids([]).shape == (0, 0, 50)
        assert batch_to_ids([[]]).shape == (1, 0, 50)


class TestIndexerEqualsAllenNlp(AllenNlpTestCase):
    def test_padded_tensors_equal_allennlp(self):
        vocab = Vocabulary()
        tokens = [Token(t) for t in HOSTILE_TOKENS]
        ours, theirs = ElmoTokenCharactersIndexer(), AllenNlpIndexer()
        ours_indexed = ours.tokens_to_indices(tokens, vocab)
        theirs_indexed = theirs.tokens_to_indices(tokens, vocab)
        assert ours_indexed == theirs_indexed
        lengths = {"elmo_tokens": len(tokens) + 3}
        assert torch.equal(
            ours.as_padded_tensor_dict(ours_indexed, lengths)["elmo_tokens"],
            theirs.as_padded_tensor_dict(theirs_indexed, lengths)["elmo_tokens"],
        )
        assert ours.get_empty_token_list() == theirs.get_empty_token_list()
