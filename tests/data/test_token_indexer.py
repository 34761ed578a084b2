from collections import defaultdict

from allennlp.common import Params
from allennlp.common.testing import AllenNlpTestCase
from allennlp.data import Token, TokenIndexer, Vocabulary

import elmo_plugin  # noqa: F401
from elmo_plugin import ElmoTokenCharactersIndexer


class TestElmoTokenCharactersIndexer(AllenNlpTestCase):
    def test_registry_resolves_to_ours(self):
        assert TokenIndexer.by_name("elmo_characters") is ElmoTokenCharactersIndexer
        indexer = TokenIndexer.from_params(Params({"type": "elmo_characters"}))
        assert isinstance(indexer, ElmoTokenCharactersIndexer)

    def test_no_vocabulary_by_default(self):
        counter = defaultdict(lambda: defaultdict(int))
        ElmoTokenCharactersIndexer().count_vocab_items(Token("word"), counter)
        assert not counter

    def test_cache_namespace_adds_word_ids(self):
        indexer = ElmoTokenCharactersIndexer(cache_namespace="elmo_words")
        counter = defaultdict(lambda: defaultdict(int))
        for text in ["a", "b", "a"]:
            indexer.count_vocab_items(Token(text), counter)
        assert dict(counter["elmo_words"]) == {"a": 2, "b": 1}
        vocab = Vocabulary()
        vocab.add_tokens_to_namespace(["a", "b"], "elmo_words")
        indexed = indexer.tokens_to_indices([Token("b"), Token("unseen")], vocab)
        assert indexed["word_inputs"] == [vocab.get_token_index("b", "elmo_words"), 1]
        padded = indexer.as_padded_tensor_dict(indexed, {"elmo_tokens": 3, "word_inputs": 3})
        assert padded["word_inputs"].tolist() == [indexed["word_inputs"][0], 1, 0]
        assert padded["elmo_tokens"].shape == (3, 50)
        assert indexer.get_empty_token_list() == {"elmo_tokens": [], "word_inputs": []}

    def test_tokens_of_one_word_share_their_character_ids(self):
        # The training corpus is held as indexed instances: a list of 50 ids per token would
        # take most of their memory (ids above 256 are objects of their own in Python).
        from elmo_plugin.data import token_indexer
        from elmo_plugin.data.character_mapper import ElmoCharacterMapper

        indexer = ElmoTokenCharactersIndexer()
        first = indexer.tokens_to_indices([Token("bank"), Token("river"), Token("bank")], Vocabulary())
        second = indexer.tokens_to_indices([Token("bank")], Vocabulary())
        ids = first["elmo_tokens"]
        assert ids[0] is ids[2] is second["elmo_tokens"][0]
        assert ids[0] == ElmoCharacterMapper().convert_word_to_char_ids("bank")

        remembered = token_indexer._WORDS_REMEMBERED
        token_indexer._WORDS_REMEMBERED = 1
        try:
            bounded = ElmoTokenCharactersIndexer()
            words = ["one", "two", "two", "<S>"]
            indexed = bounded.tokens_to_indices([Token(word) for word in words], Vocabulary())
            mapper = ElmoCharacterMapper()
            assert indexed["elmo_tokens"] == [mapper.convert_word_to_char_ids(word) for word in words]
            assert list(bounded._remembered_character_ids) == ["one"]
        finally:
            token_indexer._WORDS_REMEMBERED = remembered
