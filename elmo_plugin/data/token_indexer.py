"""
The `elmo_characters` token indexer.
"""
from typing import Dict, List, Optional

import numpy
import torch
from allennlp.common.util import pad_sequence_to_length
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary
from overrides import overrides

from elmo_plugin.data.character_mapper import (
    MAX_CHARACTERS_PER_TOKEN,
    ElmoCharacterMapper,
)

# A corpus spells the same words again and again: the character ids of the first this many
# distinct words are kept and shared by every token that spells them (never mutated).
_WORDS_REMEMBERED = 1 << 16


@TokenIndexer.register("elmo_characters", exist_ok=True)
class ElmoTokenCharactersIndexer(TokenIndexer):
    """
    Represents each token as the 50 character ids of `ElmoCharacterMapper`, under the key
    `elmo_tokens` (the argument name of `elmo_token_embedder`). Needs no vocabulary.

    # Parameters

    namespace : `str`, optional (default = `"elmo_characters"`)
        Kept for configuration compatibility with AllenNLP; no vocabulary is built.
    tokens_to_add : `Dict[str, int]`, optional (default = `None`)
        Special tokens mapped to single character ids; see `ElmoCharacterMapper`.
    token_min_padding_length : `int`, optional (default = `0`)
        See `TokenIndexer`.
    cache_namespace : `str`, optional (default = `None`)
        Also index each token's id in this vocabulary namespace, under the key `word_inputs`
        (0 for padding). With `elmo_token_embedder`'s `namespace_to_cache` set to the same
        namespace, ELMo then looks up precomputed char-CNN vectors instead of running the
        char CNN on every token.
    """

    def __init__(
        self,
        namespace: str = "elmo_characters",
        tokens_to_add: Optional[Dict[str, int]] = None,
        token_min_padding_length: int = 0,
        cache_namespace: Optional[str] = None,
    ) -> None:
        super().__init__(token_min_padding_length)
        self._namespace = namespace
        self._mapper = ElmoCharacterMapper(tokens_to_add)
        self._cache_namespace = cache_namespace
        self._remembered_character_ids: Dict[str, List[int]] = {}

    @overrides
    def count_vocab_items(self, token: Token, counter: Dict[str, Dict[str, int]]):
        if self._cache_namespace is not None:
            counter[self._cache_namespace][token.ensure_text()] += 1

    @overrides
    def get_empty_token_list(self) -> IndexedTokenList:
        if self._cache_namespace is not None:
            return {"elmo_tokens": [], "word_inputs": []}
        return {"elmo_tokens": []}

    @overrides
    def tokens_to_indices(
        self, tokens: List[Token], vocabulary: Vocabulary
    ) -> IndexedTokenList:
        texts = [token.ensure_text() for token in tokens]
        indexed: IndexedTokenList = {
            "elmo_tokens": [self._character_ids(text) for text in texts]
        }
        if self._cache_namespace is not None:
            indexed["word_inputs"] = [
                vocabulary.get_token_index(text, self._cache_namespace) for text in texts
            ]
        return indexed

    def _character_ids(self, text: str) -> List[int]:
        character_ids = self._remembered_character_ids.get(text)
        if character_ids is None:
            character_ids = self._mapper.convert_word_to_char_ids(text)
            if len(self._remembered_character_ids) < _WORDS_REMEMBERED:
                self._remembered_character_ids[text] = character_ids
        return character_ids

    @overrides
    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        # A padded token is all zeros, not a token of padding characters: the model masks on 0.
        padded = pad_sequence_to_length(
            tokens["elmo_tokens"],
            padding_lengths["elmo_tokens"],
            default_value=lambda: [0] * MAX_CHARACTERS_PER_TOKEN,
        )
        # Through numpy: torch's constructor reads nested lists element by element, at about
        # three times the cost (BENCHMARKS.md, "Reading the corpus").
        tensors = {"elmo_tokens": torch.from_numpy(numpy.array(padded, dtype=numpy.int64))}
        if self._cache_namespace is not None:
            tensors["word_inputs"] = torch.LongTensor(
                pad_sequence_to_length(tokens["word_inputs"], padding_lengths["word_inputs"])
            )
        return tensors
