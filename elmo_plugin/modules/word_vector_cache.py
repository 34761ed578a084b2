"""
Context-free token vectors: layer 0 of the biLM for a list of tokens (bilm-tf's token
embeddings), and the cache of such vectors that lets `forward` take word ids instead of
characters (`vocab_to_cache`). Both come from `token_vectors`, the one way in.
"""
from typing import List, Tuple

import torch
from allennlp.nn.util import add_sentence_boundary_token_ids

from elmo_plugin.data.character_mapper import ElmoCharacterMapper, batch_to_ids
from elmo_plugin.modules.token_layer import ElmoTokenEncoder

# Tokens per chunk when the token layer embeds a long list.
_TOKENS_PER_CHUNK = 1024


@torch.no_grad()
def token_vectors(token_encoder: ElmoTokenEncoder, tokens: List[str]) -> torch.Tensor:
    """
    The context-free vector of every token, `(len(tokens), output_dim)`: layer 0 of the
    biLM for that token, in any context.
    """
    reference = next(token_encoder.parameters())
    vectors = [reference.new_zeros(0, token_encoder.get_output_dim())]
    for start in range(0, len(tokens), _TOKENS_PER_CHUNK):
        chunk = list(tokens[start : start + _TOKENS_PER_CHUNK])
        character_ids = batch_to_ids([chunk])[0].to(reference.device)
        vectors.append(token_encoder.embed_tokens(character_ids))
    return torch.cat(vectors, dim=0)


class CachedWordVectors(torch.nn.Embedding):
    """
    The context-free vectors of a fixed word list, looked up by word id (AllenNLP's
    `vocab_to_cache`). An `Embedding` (row 0 is padding), so that a biLM holding it has
    AllenNLP's parameter name `_word_embedding.weight`.

    # Parameters

    token_encoder : `ElmoTokenEncoder`
        The biLM's token layer, which computes the vectors once.
    words : `List[str]`
        The words, in id order; id 0 is padding.
    trainable : `bool`, optional (default = `False`)
        Fine-tune the cached vectors (separately from the token layer, which words outside
        the list still use).
    """

    def __init__(self, token_encoder: ElmoTokenEncoder, words: List[str], trainable: bool = False) -> None:
        vectors = token_vectors(
            token_encoder, [ElmoCharacterMapper.bos_token, ElmoCharacterMapper.eos_token] + list(words)
        )
        super().__init__(len(words), vectors.size(1), padding_idx=0, _weight=vectors[2:].clone())
        self.weight.requires_grad = trainable
        self.register_buffer("_bos_vector", vectors[0].clone(), persistent=False)
        self.register_buffer("_eos_vector", vectors[1].clone(), persistent=False)

    @property
    def boundary_vectors(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The `<S>` and `</S>` vectors, computed once from the token layer as it was built;
        not in the state dict, whose keys are AllenNLP's (a trained model records them:
        `weights.recorded`)."""
        return self._bos_vector, self._eos_vector

    @boundary_vectors.setter
    def boundary_vectors(self, vectors: Tuple[torch.Tensor, torch.Tensor]) -> None:
        with torch.no_grad():
            for buffer, vector in zip(self.boundary_vectors, vectors):
                buffer.copy_(vector)

    def embed_sentences(self, word_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.BoolTensor]:
        """
        `(batch_size, timesteps)` word ids (0 for padding) -> the token layer with `<S>` and
        `</S>` added, `(batch_size, timesteps + 2, dim)`, and its mask.
        """
        word_mask = word_ids > 0
        vectors, _ = add_sentence_boundary_token_ids(
            self(word_ids), word_mask, self._bos_vector, self._eos_vector
        )
        # The mask comes from the ids; AllenNLP derives it from the vectors' signs, which
        # would drop a word whose vector happens to have no positive entry.
        _, mask = add_sentence_boundary_token_ids(word_mask.long(), word_mask, 1, 1)
        return vectors, mask
