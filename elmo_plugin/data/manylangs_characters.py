"""
ELMoForManyLangs' token encoding (HIT-SCIR's ELMo for many languages), reproduced exactly:

- sentences are wrapped in the tokens `<bos>` and `<eos>`;
- a token is cut to its first `max_characters_per_token - 2` (48) characters (Unicode
  characters, not bytes), then looked up character by character in the character vocabulary
  (`<oov>` where absent), framed by the word markers and padded with `<pad>`. Its code takes
  the markers swapped: the id of `<eow>` goes first and the id of `<bow>` last, and a model
  trained with it expects them so;
- `<bos>` and `<eos>` become the marker, their own id, the marker;
- the (cut) token is looked up in the word vocabulary, `<oov>` where absent.
"""
from typing import Optional, Sequence, Tuple

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.character_mapper import SentenceBoundary
from elmo_plugin.data.special_tokens import BOS_TOKEN

BOS, EOS, BOW, EOW, OOV, PAD = "<bos>", "<eos>", "<bow>", "<eow>", "<oov>", "<pad>"
SPECIAL_CHARACTERS = (BOS, EOS, BOW, EOW, OOV, PAD)
SPECIAL_WORDS = (BOS, EOS, OOV, PAD)


class ManyLangsTokenMapper:
    """
    Token text -> ELMoForManyLangs' character ids and word id.

    # Parameters

    characters : `Sequence[str]`
        The character vocabulary in id order (`char.dic`).
    words : `Sequence[str]`, optional
        The word vocabulary in id order (`word.dic`), for a model with word vectors.
    max_characters_per_token : `int`
        The width of a token's character ids (the model's `max_characters_per_token`).
    """

    def __init__(
        self, characters: Sequence[str], words: Optional[Sequence[str]], max_characters_per_token: int
    ) -> None:
        self.width = max_characters_per_token
        self._characters = _index_of(characters, SPECIAL_CHARACTERS, "character")
        self._words = None if words is None else _index_of(words, SPECIAL_WORDS, "word")
        # The markers as ELMoForManyLangs' code takes them (see the module docstring).
        self._first_marker, self._last_marker = self._characters[EOW], self._characters[BOW]

    def ids(self, tokens: Sequence[Optional[str]]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """
        Character ids `(len(tokens), width)` and word ids `(len(tokens),)` (`None` without
        word vectors). ELMo's sentence boundaries (`SentenceBoundary`) are ELMoForManyLangs'
        `<bos>` and `<eos>`, and the text `<S>` or `</S>` in a sentence is read as characters,
        as its code reads it; a `None` token (padding) is all `<pad>`.
        """
        pad = self._characters[PAD]
        character_ids = torch.full((len(tokens), self.width), pad, dtype=torch.long)
        word_ids = torch.full((len(tokens),), self._words[PAD], dtype=torch.long) if self._words else None
        for row, token in enumerate(tokens):
            if token is None:
                continue
            if isinstance(token, SentenceBoundary):
                token = BOS if token == BOS_TOKEN else EOS
            if token in (BOS, EOS):
                characters = [self._characters[token]]
            else:
                token = token[: self.width - 2]
                characters = [self._characters.get(character, self._characters[OOV]) for character in token]
            character_ids[row, : len(characters) + 2] = torch.tensor(
                [self._first_marker, *characters, self._last_marker]
            )
            if word_ids is not None:
                word_ids[row] = self._words.get(token, self._words[OOV])
        return character_ids, word_ids


def _index_of(vocabulary: Sequence[str], required: Sequence[str], kind: str) -> dict:
    index = {}
    for position, entry in enumerate(vocabulary):
        index.setdefault(entry, position)
    missing = [token for token in required if token not in index]
    if missing:
        raise ConfigurationError(
            f"An ELMoForManyLangs {kind} vocabulary needs {', '.join(required)}; it lacks {', '.join(missing)}."
        )
    return index
