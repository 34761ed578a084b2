"""
The token layer of an ELMoForManyLangs biLM (HIT-SCIR's pretrained ELMo for many languages).
"""
import logging
from typing import Dict, List, Mapping, Optional, Sequence

import numpy
import torch

from elmo_plugin.data.character_mapper import (
    END_OF_WORD_CHARACTER,
    MAX_CHARACTERS_PER_TOKEN,
    tokens_of_ids,
    whole_token_ids,
)
from elmo_plugin.data.manylangs_characters import ManyLangsTokenMapper
from elmo_plugin.kernels.products import Kernels
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.modules.distinct_rows import distinct_rows
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, parameter_array

logger = logging.getLogger(__name__)


class ElmoForManyLangsEncoder(ElmoCharacterEncoder):
    """
    A char CNN over ELMoForManyLangs' Unicode character vocabulary, its highway layers, the
    word vector (if the model has word vectors) before the CNN's features, and the projection
    to the LSTM's input: ELMoForManyLangs' `ConvTokenEmbedder`.

    It reads ELMo's character ids like every token layer, so `Elmo`, the `elmo_characters`
    indexer, `batch_to_ids` and the biLM model take these models unchanged; it recovers each
    token's text from them and encodes it as ELMoForManyLangs does (`ManyLangsTokenMapper`).
    Those ids hold a token's first 48 UTF-8 bytes; ELMoForManyLangs keeps its first 48
    characters. `character_ids`, which `ElmoEmbedder` and `allennlp elmo` use, keeps tokens
    whole, so there every token is encoded exactly as ELMoForManyLangs encodes it.

    # Parameters

    options : `ElmoOptions`
        The architecture (`characters` = `"elmoformanylangs"`).
    characters : `Sequence[str]`
        The character vocabulary, in the character table's row order.
    words : `Sequence[str]`, optional
        The word vocabulary in row order, for a model with word vectors.
    requires_grad : `bool`, optional (default = `False`)
        Whether the parameters are trained.
    kernels : `Kernels`, optional
        Computes the CNN, highway and projection products.
    """

    def __init__(
        self,
        options: ElmoOptions,
        characters: Sequence[str],
        words: Optional[Sequence[str]] = None,
        requires_grad: bool = False,
        kernels: Optional[Kernels] = None,
    ) -> None:
        super().__init__(options, requires_grad=requires_grad, kernels=kernels)
        self.characters: List[str] = list(characters)
        self.words: Optional[List[str]] = None if words is None else list(words)
        self._mapper = ManyLangsTokenMapper(self.characters, self.words, options.max_characters_per_token)
        self._char_embedding_weights = torch.nn.Parameter(
            torch.empty(len(self.characters), options.char_embedding_dim).uniform_(-0.25, 0.25),
            requires_grad=requires_grad,
        )
        self.word_embedding: Optional[torch.nn.Embedding] = None
        if self.words is not None:
            self.word_embedding = torch.nn.Embedding(len(self.words), options.word_dim)
            self.word_embedding.weight.requires_grad = requires_grad
        self._warned_about_cut_tokens = False

    # ELMoForManyLangs' carried state reads `<bos> <eos>` for an empty sentence, even when a
    # whole batch is empty (ELMo's embedders skip an all-empty batch).
    empty_sentences_advance_state = True

    def character_ids(self, batch: List[List[str]]) -> torch.Tensor:
        """Character ids that keep every token whole (see the class docstring)."""
        return whole_token_ids(batch)

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, width)` ELMo character ids to `(num_tokens, projection_dim)`."""
        distinct_ids, copies = distinct_rows(character_ids)
        tokens = tokens_of_ids(distinct_ids)
        self._warn_about_cut_tokens(distinct_ids, tokens)
        char_ids, word_ids = self._mapper.ids(tokens)
        device = self._char_embedding_weights.device
        vectors = []
        tokens_per_chunk = self._tokens_per_chunk()
        for start in range(0, len(tokens), tokens_per_chunk):
            chunk = slice(start, start + tokens_per_chunk)
            # (chunk, n_filters), then the word vector before it: (chunk, token_features)
            features = self._character_features(char_ids[chunk].to(device))
            if self.word_embedding is not None:
                features = torch.cat([self.word_embedding(word_ids[chunk].to(device)), features], dim=-1)
            vectors.append(self._project(features))
        return torch.cat(vectors).index_select(0, copies)

    def _warn_about_cut_tokens(self, character_ids: torch.Tensor, tokens: List[Optional[str]]) -> None:
        # A token that fills all 48 bytes of ELMo's ids may have lost characters that
        # ELMoForManyLangs would have read (it keeps 48 characters, not bytes).
        if self._warned_about_cut_tokens or character_ids.size(-1) != MAX_CHARACTERS_PER_TOKEN:
            return
        # The last of the 50 ids is the end-of-word marker only after 48 bytes of text.
        full = (character_ids[:, -1] == END_OF_WORD_CHARACTER + 1).tolist()
        if any(filled and len(token) < 48 for filled, token in zip(full, tokens) if token is not None):
            logger.warning(
                "Tokens longer than 48 UTF-8 bytes reach this ELMoForManyLangs model cut from ELMo's "
                "character ids; ElmoEmbedder and `allennlp elmo` pass them whole."
            )
            self._warned_about_cut_tokens = True

    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """The character table and word vectors as the file holds them, and the CNN's."""
        values = {"_char_embedding_weights": arrays[layout.CHAR_EMBEDDING]}
        if self.word_embedding is not None:
            values["word_embedding.weight"] = arrays[layout.WORD_VECTORS]
        values.update(self._cnn_parameters_from_arrays(arrays))
        return values

    def vocabularies(self) -> Dict[str, List[str]]:
        vocabularies = {layout.CHAR_VOCABULARY: self.characters}
        if self.words is not None:
            vocabularies[layout.WORD_VOCABULARY] = self.words
        return vocabularies

    def arrays_from_parameters(self) -> Arrays:
        """The layout's datasets of an ELMoForManyLangs token layer, vocabularies included."""
        arrays = {layout.CHAR_EMBEDDING: parameter_array(self._char_embedding_weights)}
        if self.word_embedding is not None:
            arrays[layout.WORD_VECTORS] = parameter_array(self.word_embedding.weight)
        arrays.update((name, numpy.array(words, dtype=object)) for name, words in self.vocabularies().items())
        arrays.update(self._cnn_arrays_from_parameters())
        return arrays
