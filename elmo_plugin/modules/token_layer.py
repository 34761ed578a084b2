"""
What ELMo's two token layers share: they read character ids and add the sentence boundaries.
"""
from typing import Dict, List

import torch
from allennlp.nn.util import add_sentence_boundary_token_ids

from elmo_plugin.data.character_mapper import PADDING_CHARACTER, ElmoCharacterMapper, batch_to_ids


class ElmoTokenEncoder(torch.nn.Module):
    """
    Base of `ElmoCharacterEncoder` (char CNN) and `ElmoWordEncoder` (word embedding): both map
    ELMo character ids to context-free token vectors (`embed_tokens`, defined by each), and
    `forward` adds `<S>` and `</S>` around every sentence first.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer(
            "_beginning_of_sentence_characters",
            torch.tensor(ElmoCharacterMapper.beginning_of_sentence_characters) + 1,
            persistent=False,
        )
        self.register_buffer(
            "_end_of_sentence_characters",
            torch.tensor(ElmoCharacterMapper.end_of_sentence_characters) + 1,
            persistent=False,
        )

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, 50)` character ids to `(num_tokens, output_dim)`."""
        raise NotImplementedError

    def vocabularies(self) -> Dict[str, List[str]]:
        """The word lists this layer reads besides its parameters, by their names in the weight
        layout (none for ELMo's char CNN)."""
        return {}

    def character_ids(self, batch: List[List[str]]) -> torch.Tensor:
        """The character ids this layer reads for tokenized sentences (`batch_to_ids`; a layer
        that can use more of a token than its first 48 bytes returns wider ids)."""
        return batch_to_ids(batch)

    def forward(self, inputs: torch.Tensor) -> Dict[str, torch.Tensor]:
        """
        # Parameters

        inputs : `torch.Tensor`
            Character ids of shape `(batch_size, timesteps, 50)`; padded tokens are all 0.

        # Returns

        `{"mask": (batch_size, timesteps + 2) bool, "token_embedding":
        (batch_size, timesteps + 2, output_dim)}`, with `<S>` and `</S>` added.
        """
        mask = (inputs > 0).any(dim=-1)
        beginning, end = self._beginning_of_sentence_characters, self._end_of_sentence_characters
        if inputs.size(-1) > beginning.size(0):  # wider ids (`character_ids`): more padding
            padding = beginning.new_full((inputs.size(-1) - beginning.size(0),), PADDING_CHARACTER + 1)
            beginning, end = torch.cat([beginning, padding]), torch.cat([end, padding])
        character_ids_with_bos_eos, mask_with_bos_eos = add_sentence_boundary_token_ids(
            inputs, mask, beginning, end
        )
        batch_size, sequence_length, characters_per_token = character_ids_with_bos_eos.size()
        token_embedding = self.embed_tokens(
            character_ids_with_bos_eos.view(-1, characters_per_token)
        )
        return {
            "mask": mask_with_bos_eos,
            "token_embedding": token_embedding.view(batch_size, sequence_length, -1),
        }
