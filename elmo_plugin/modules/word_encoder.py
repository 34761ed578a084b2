"""
The token layer of a word-input biLM: one trained vector per word of its vocabulary.
"""
import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple

import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.character_mapper import batch_to_ids
from elmo_plugin.data.special_tokens import SPECIAL_TOKENS, UNKNOWN_TOKEN
from elmo_plugin.modules.distinct_rows import distinct_rows
from elmo_plugin.modules.token_layer import ElmoTokenEncoder
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, parameter_array


class ElmoWordEncoder(ElmoTokenEncoder):
    """
    The word-input counterpart of `ElmoCharacterEncoder`, with the same interface: it reads
    ELMo character ids (from `batch_to_ids` or the `elmo_characters` indexer) and recognises
    each token by them, so `Elmo`, `elmo_token_embedder`, `ElmoEmbedder` and `allennlp elmo`
    take a word-input biLM without any change to their inputs. A token outside the vocabulary
    gets the vector of `<UNK>`. (Character ids hold a word's first 48 UTF-8 bytes: vocabulary
    words that agree on those share the first one's vector.)

    # Parameters

    vocabulary : `List[str]`
        The biLM's words in id order, `<S>`, `</S>` and `<UNK>` among them.
    embedding_dim : `int`
        The vector size (the LSTM input size, `projection_dim`).
    requires_grad : `bool`, optional (default = `False`)
        Whether the vectors are trained.
    """

    def __init__(self, vocabulary: List[str], embedding_dim: int, requires_grad: bool = False) -> None:
        super().__init__()
        missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
        if missing:
            raise ConfigurationError(
                f"A word-input biLM's vocabulary needs {', '.join(SPECIAL_TOKENS)}; it lacks "
                f"{', '.join(missing)}."
            )
        self.vocabulary = list(vocabulary)
        self.embedding_dim = embedding_dim
        self.embedding = torch.nn.Embedding(len(vocabulary), embedding_dim)
        # bilm-tf creates the token embedding with TensorFlow's default (Glorot uniform).
        torch.nn.init.xavier_uniform_(self.embedding.weight)
        self.embedding.weight.requires_grad = requires_grad
        self._word_ids: Dict[bytes, int] = {}
        for word_id, characters in enumerate(batch_to_ids([vocabulary])[0].numpy()):
            self._word_ids.setdefault(characters.tobytes(), word_id)
        self._unknown_id = vocabulary.index(UNKNOWN_TOKEN)

    def get_output_dim(self) -> int:
        return self.embedding_dim

    def word_ids(self, character_ids: torch.Tensor) -> torch.Tensor:
        """`(num_tokens, 50)` character ids -> `(num_tokens,)` vocabulary ids (`<UNK>` if unknown)."""
        distinct, positions = distinct_rows(character_ids)
        ids = [
            self._word_ids.get(row.tobytes(), self._unknown_id)
            for row in distinct.to(device="cpu", dtype=torch.long).numpy()
        ]
        return torch.tensor(ids, dtype=torch.long, device=character_ids.device)[positions]

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, 50)` character ids to `(num_tokens, embedding_dim)`."""
        return self.embedding(self.word_ids(character_ids))

    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """The embedding from the layout's `embedding` dataset (rows in vocabulary order)."""
        return {"embedding.weight": arrays[layout.WORD_EMBEDDING]}

    def vocabularies(self) -> Dict[str, List[str]]:
        return {layout.VOCABULARY: self.vocabulary}

    def arrays_from_parameters(self) -> Arrays:
        """The layout's `embedding` and `vocabulary` datasets."""
        arrays = {layout.WORD_EMBEDDING: parameter_array(self.embedding.weight)}
        arrays.update((name, numpy.array(words, dtype=object)) for name, words in self.vocabularies().items())
        return arrays


def word_input_vocabulary(
    options: ElmoOptions,
    arrays: Optional[Mapping[str, numpy.ndarray]],
    vocabulary: Optional[List[str]],
    source: str,
) -> Tuple[ElmoOptions, List[str]]:
    """
    A word-input biLM's words and its options with their number: from the weight file's
    `vocabulary` (`arrays`, read from `source`), from `vocabulary` (to train one from scratch),
    or both when they agree.
    """
    if arrays is not None:
        in_file = [str(word) for word in arrays[layout.VOCABULARY]]
        if vocabulary is not None and list(vocabulary) != in_file:
            differing = next(
                (i for i, (a, b) in enumerate(zip(vocabulary, in_file)) if a != b),
                min(len(vocabulary), len(in_file)),
            )
            raise ConfigurationError(
                f"The vocabulary of the word-input biLM {source} ({len(in_file)} words) differs "
                f"from the one given ({len(vocabulary)} words) first at id {differing}; train or "
                "fine-tune it with the vocabulary exported next to it (vocab.txt)."
            )
        vocabulary = in_file
    if vocabulary is None:
        raise ConfigurationError(
            "A word-input biLM (options without 'char_cnn') needs its vocabulary: a "
            "weight file that holds one, or the 'vocabulary' argument."
        )
    if options.n_tokens_vocab not in (None, len(vocabulary)):
        raise ConfigurationError(
            f"The options give n_tokens_vocab {options.n_tokens_vocab}, but the "
            f"vocabulary has {len(vocabulary)} words."
        )
    return dataclasses.replace(options, n_tokens_vocab=len(vocabulary)), list(vocabulary)
