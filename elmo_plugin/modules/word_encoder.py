"""
The token layer of a word-input biLM: one trained vector per word of its vocabulary.
"""
from typing import Dict, List

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.bilm_vocabulary import SPECIAL_TOKENS
from elmo_plugin.data.character_mapper import batch_to_ids
from elmo_plugin.modules.token_encoder import ElmoTokenEncoder

_UNKNOWN = SPECIAL_TOKENS[2]


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
        self.embedding_dim = embedding_dim
        self.embedding = torch.nn.Embedding(len(vocabulary), embedding_dim)
        # bilm-tf creates the token embedding with TensorFlow's default (Glorot uniform).
        torch.nn.init.xavier_uniform_(self.embedding.weight)
        self.embedding.weight.requires_grad = requires_grad
        self._word_ids: Dict[bytes, int] = {}
        for word_id, characters in enumerate(batch_to_ids([vocabulary])[0].numpy()):
            self._word_ids.setdefault(characters.tobytes(), word_id)
        self._unknown_id = vocabulary.index(_UNKNOWN)

    def get_output_dim(self) -> int:
        return self.embedding_dim

    def word_ids(self, character_ids: torch.Tensor) -> torch.Tensor:
        """`(num_tokens, 50)` character ids -> `(num_tokens,)` vocabulary ids (`<UNK>` if unknown)."""
        distinct, positions = torch.unique(character_ids, dim=0, return_inverse=True)
        ids = [
            self._word_ids.get(row.tobytes(), self._unknown_id)
            for row in distinct.to(device="cpu", dtype=torch.long).numpy()
        ]
        return torch.tensor(ids, dtype=torch.long, device=character_ids.device)[positions]

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, 50)` character ids to `(num_tokens, embedding_dim)`."""
        return self.embedding(self.word_ids(character_ids))
