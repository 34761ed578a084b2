"""
ELMo's character vocabulary: the UTF-8 bytes of a token plus five special characters.
"""
import functools
from typing import Dict, List, Optional

import numpy
import torch

from elmo_plugin.data.special_tokens import BOS_TOKEN, EOS_TOKEN

MAX_CHARACTERS_PER_TOKEN = 50

# Ids 0-255 are UTF-8 byte values; the special characters follow.
BEGINNING_OF_SENTENCE_CHARACTER = 256
END_OF_SENTENCE_CHARACTER = 257
BEGINNING_OF_WORD_CHARACTER = 258
END_OF_WORD_CHARACTER = 259
PADDING_CHARACTER = 260


def _special_token_character_ids(character: int) -> List[int]:
    character_ids = [PADDING_CHARACTER] * MAX_CHARACTERS_PER_TOKEN
    character_ids[0] = BEGINNING_OF_WORD_CHARACTER
    character_ids[1] = character
    character_ids[2] = END_OF_WORD_CHARACTER
    return character_ids


class ElmoCharacterMapper:
    """
    Maps a token to the 50 character ids the ELMo char CNN reads.

    A token becomes `<begin word>`, its UTF-8 bytes (at most 48: longer tokens are cut, even
    inside a multi-byte character, as bilm-tf does), `<end word>`, then padding characters.
    `<S>` and `</S>` map to the sentence-boundary characters. Every id is shifted by +1 so that
    0 is free for padded token positions.

    # Parameters

    tokens_to_add : `Dict[str, int]`, optional (default = `None`)
        Extra special tokens, each mapped to a single character id (before the +1 shift) that
        replaces the token's bytes, e.g. `{"<mask>": 261}` for a biLM trained with it.
    """

    max_word_length = MAX_CHARACTERS_PER_TOKEN
    bos_token = BOS_TOKEN
    eos_token = EOS_TOKEN
    beginning_of_sentence_characters = _special_token_character_ids(BEGINNING_OF_SENTENCE_CHARACTER)
    end_of_sentence_characters = _special_token_character_ids(END_OF_SENTENCE_CHARACTER)

    def __init__(self, tokens_to_add: Optional[Dict[str, int]] = None) -> None:
        self.tokens_to_add = tokens_to_add or {}

    def convert_word_to_char_ids(self, word: str) -> List[int]:
        if word in self.tokens_to_add:
            character_ids = _special_token_character_ids(self.tokens_to_add[word])
        elif word == self.bos_token:
            character_ids = self.beginning_of_sentence_characters
        elif word == self.eos_token:
            character_ids = self.end_of_sentence_characters
        else:
            # "ignore" only drops lone surrogates, which have no UTF-8 encoding.
            word_bytes = word.encode("utf-8", "ignore")[: MAX_CHARACTERS_PER_TOKEN - 2]
            character_ids = [PADDING_CHARACTER] * MAX_CHARACTERS_PER_TOKEN
            character_ids[0] = BEGINNING_OF_WORD_CHARACTER
            character_ids[1 : len(word_bytes) + 1] = word_bytes
            character_ids[len(word_bytes) + 1] = END_OF_WORD_CHARACTER
        return [character_id + 1 for character_id in character_ids]

    def __eq__(self, other) -> bool:
        if isinstance(self, other.__class__):
            return self.__dict__ == other.__dict__
        return NotImplemented


_DEFAULT_MAPPER = ElmoCharacterMapper()


# Words repeat (a corpus's most frequent thousands cover most of its tokens), and mapping one
# costs microseconds in Python, which was most of the host's work per token on a GPU: each
# word's ids are kept, as the bytes of its int16 row, for the next time.
@functools.lru_cache(maxsize=1 << 17)
def _character_id_bytes(word: str) -> bytes:
    return numpy.array(_DEFAULT_MAPPER.convert_word_to_char_ids(word), dtype=numpy.int16).tobytes()


def batch_to_ids(batch: List[List[str]]) -> torch.Tensor:
    """
    Converts a batch of tokenized sentences to a `(batch_size, max_sentence_length, 50)`
    LongTensor of character ids for `Elmo` / `ElmoBiLm`; padded token positions are all 0.
    An empty batch gives shape `(0, 0, 50)`.
    """
    lengths = torch.tensor([len(sentence) for sentence in batch], dtype=torch.long)
    max_length = int(lengths.max()) if len(batch) else 0
    character_ids = torch.zeros(len(batch), max_length, MAX_CHARACTERS_PER_TOKEN, dtype=torch.long)
    rows = b"".join(_character_id_bytes(token) for sentence in batch for token in sentence)
    if rows:
        # (tokens, 50), in the order of the batch's real positions, row by row.
        tokens = numpy.frombuffer(rows, dtype=numpy.int16).astype(numpy.int64).reshape(-1, MAX_CHARACTERS_PER_TOKEN)
        character_ids[torch.arange(max_length).unsqueeze(0) < lengths.unsqueeze(1)] = torch.from_numpy(tokens)
    return character_ids


def whole_token_ids(batch: List[List[str]]) -> torch.Tensor:
    """
    ELMo's character ids without the cut at 48 bytes, for token layers that read the text back
    (`tokens_of_ids`): rows as wide as the batch's longest token needs (at least 50), and `<S>`
    or `</S>` in the text as ordinary characters rather than the sentence boundaries.
    """
    encoded = [[token.encode("utf-8", "ignore") for token in sentence] for sentence in batch]
    width = max([MAX_CHARACTERS_PER_TOKEN] + [len(token) + 2 for sentence in encoded for token in sentence])
    length = max((len(sentence) for sentence in batch), default=0)
    character_ids = torch.zeros(len(batch), length, width, dtype=torch.long)
    for row, sentence in enumerate(encoded):
        for position, token in enumerate(sentence):
            ids = [BEGINNING_OF_WORD_CHARACTER, *token, END_OF_WORD_CHARACTER]
            ids += [PADDING_CHARACTER] * (width - len(ids))
            character_ids[row, position] = torch.tensor(ids) + 1
    return character_ids


class SentenceBoundary(str):
    """`<S>` or `</S>` read from the sentence-boundary character ids, as opposed to the same
    text written in a sentence (equal to it as a string)."""


SENTENCE_START, SENTENCE_END = SentenceBoundary(BOS_TOKEN), SentenceBoundary(EOS_TOKEN)


def tokens_of_ids(character_ids: torch.Tensor) -> List[Optional[str]]:
    """
    The inverse of the mapping for rows of character ids `(num_tokens, width)`, any width: the
    token's text (its UTF-8 bytes between the word markers; a token cut at 48 bytes inside a
    character loses that character), `SENTENCE_START` and `SENTENCE_END` for the sentence
    boundaries (`isinstance(token, SentenceBoundary)` tells them from text), `None` for
    padded positions (all zeros). A character id that is no byte (`tokens_to_add`) reads as
    U+FFFD.
    """
    tokens: List[Optional[str]] = []
    for row in (character_ids.to(device="cpu", dtype=torch.long) - 1).tolist():
        if row[0] == -1:
            tokens.append(None)
        elif row[1] in (BEGINNING_OF_SENTENCE_CHARACTER, END_OF_SENTENCE_CHARACTER) and row[2] == END_OF_WORD_CHARACTER:
            tokens.append(SENTENCE_START if row[1] == BEGINNING_OF_SENTENCE_CHARACTER else SENTENCE_END)
        else:
            end = row.index(END_OF_WORD_CHARACTER, 1) if END_OF_WORD_CHARACTER in row[1:] else len(row)
            text = bytearray()
            for character in row[1:end]:
                text += bytes([character]) if character < 256 else "\ufffd".encode("utf-8")
            tokens.append(text.decode("utf-8", "ignore"))
    return tokens
