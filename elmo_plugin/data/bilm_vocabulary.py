"""
The biLM's softmax vocabulary, in bilm-tf's convention: `<S>`, `</S>` and `<UNK>` are words
like any other, unknown words map to `<UNK>`, and ids follow the vocab file (or frequency).
"""
import collections
import logging
import os
from typing import Dict, Iterable, List, Optional, Union

from allennlp.common.checks import ConfigurationError
from allennlp.data.instance import Instance
from allennlp.data.vocabulary import DEFAULT_PADDING_TOKEN, Vocabulary
from overrides import overrides

from elmo_plugin.data.bilm_corpus_reader import (
    FORWARD_WINDOW_FIELD,
    LM_NAMESPACE,
    SENTENCE_FIELD,
)
from elmo_plugin.data.special_tokens import SPECIAL_TOKENS, UNKNOWN_TOKEN
from elmo_plugin.data.vocab_file import read_bilm_vocab_file

logger = logging.getLogger(__name__)


@Vocabulary.register("bilm", constructor="from_bilm_corpus")
class BiLmVocabulary(Vocabulary):
    """
    A `Vocabulary` whose `lm_tokens` namespace is the biLM's softmax vocabulary: no padding
    entry, `<UNK>` as the unknown word, ids in the order of a bilm-tf vocab file or, built from
    data, `<S>`, `</S>`, `<UNK>` and then the words by decreasing count (the order the sampled
    softmax's log-uniform sampler assumes). Registered as `bilm`:
    `"vocabulary": {"type": "bilm", "vocab_file": "vocab.txt"}` or
    `{"type": "bilm", "min_count": 3}`.
    """

    @classmethod
    def from_bilm_corpus(
        cls,
        instances: Optional[Iterable[Instance]] = None,
        vocab_file: Optional[str] = None,
        min_count: int = 1,
        max_vocab_size: Optional[int] = None,
    ) -> "BiLmVocabulary":
        """
        # Parameters

        instances : `Iterable[Instance]`, optional
            The training data (from `elmo_bilm_corpus`); only read when `vocab_file` is unset.
        vocab_file : `str`, optional
            A bilm-tf vocab file (path or URL); its order gives the ids.
        min_count : `int`, optional (default = `1`)
            Built from data: the fewest occurrences a word needs.
        max_vocab_size : `int`, optional
            Built from data: keep at most this many words (special tokens included).
        """
        if max_vocab_size is not None and max_vocab_size <= len(SPECIAL_TOKENS) and not vocab_file:
            raise ConfigurationError(
                f"biLM vocabulary: max_vocab_size={max_vocab_size} leaves no room for words "
                f"besides {', '.join(SPECIAL_TOKENS)}."
            )
        if vocab_file is not None:
            if min_count != 1 or max_vocab_size is not None:
                raise ConfigurationError(
                    "biLM vocabulary: 'min_count' and 'max_vocab_size' apply to a vocabulary "
                    "built from the data, not to 'vocab_file'."
                )
            words = read_bilm_vocab_file(vocab_file)
        elif instances is None:
            raise ConfigurationError(
                "biLM vocabulary: give 'vocab_file', or build it from the training data."
            )
        else:
            words = cls._words_from_instances(instances, min_count, max_vocab_size)
        vocabulary = cls(non_padded_namespaces=[LM_NAMESPACE], oov_token=UNKNOWN_TOKEN)
        vocabulary.add_tokens_to_namespace(words, LM_NAMESPACE)
        logger.info("biLM vocabulary: %d words", len(words))
        return vocabulary

    @staticmethod
    def words(vocabulary: Vocabulary) -> List[str]:
        """The `lm_tokens` words in id order (what `write_bilm_vocab_file` takes)."""
        index_to_token = vocabulary.get_index_to_token_vocabulary(LM_NAMESPACE)
        return [index_to_token[index] for index in range(len(index_to_token))]

    @staticmethod
    def _words_from_instances(
        instances: Iterable[Instance], min_count: int, max_vocab_size: Optional[int]
    ) -> List[str]:
        counts: Dict[str, int] = collections.Counter()
        for instance in instances:
            if SENTENCE_FIELD in instance.fields:
                tokens = instance.fields[SENTENCE_FIELD].tokens  # type: ignore
            else:
                # Consecutive windows overlap by one token; counting all but the first token
                # of each counts every token of the text once.
                tokens = instance.fields[FORWARD_WINDOW_FIELD].tokens[1:]  # type: ignore
            counts.update(token.text for token in tokens)
        if not counts:
            raise ConfigurationError("biLM vocabulary: the training data holds no words.")
        words = sorted(
            (
                word
                for word, count in counts.items()
                if count >= min_count and word not in SPECIAL_TOKENS
            ),
            key=lambda word: (-counts[word], word),
        )
        words = list(SPECIAL_TOKENS) + words
        if max_vocab_size is not None:
            words = words[:max_vocab_size]
        return words

    @classmethod
    @overrides
    def from_files(
        cls,
        directory: Union[str, os.PathLike],
        padding_token: Optional[str] = DEFAULT_PADDING_TOKEN,
        oov_token: Optional[str] = UNKNOWN_TOKEN,
    ) -> "Vocabulary":
        # Loading a model archive passes oov_token=None unless the config names one.
        return super().from_files(directory, padding_token, oov_token or UNKNOWN_TOKEN)
