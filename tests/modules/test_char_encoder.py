import torch

from elmo_plugin import batch_to_ids
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE

SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog"], ["a", "cat", "!"]]


def _encoder(requires_grad: bool = False) -> ElmoCharacterEncoder:
    torch.manual_seed(0)
    return ElmoCharacterEncoder(ElmoOptions.from_file(ELMO_OPTIONS_FILE), requires_grad).double()


def test_each_distinct_token_goes_through_the_cnn_once_and_every_copy_gets_its_vector():
    encoder = _encoder()
    character_ids = batch_to_ids(SENTENCES).view(-1, 50)  # 18 rows: 8 distinct words, padding
    rows_embedded = []
    embed_distinct = encoder._embed_distinct_tokens
    encoder._embed_distinct_tokens = lambda ids: rows_embedded.append(len(ids)) or embed_distinct(ids)
    vectors = encoder.embed_tokens(character_ids)
    assert rows_embedded == [9]
    alone = torch.cat([embed_distinct(row.unsqueeze(0)) for row in character_ids])
    assert torch.allclose(vectors, alone, atol=1e-12, rtol=0)


def test_gradients_of_repeated_tokens_are_summed_as_if_each_copy_were_embedded():
    character_ids = batch_to_ids(SENTENCES).view(-1, 50)
    weights = torch.randn(character_ids.size(0), 1, dtype=torch.float64)
    gradients = []
    for embed in ("embed_tokens", "_embed_distinct_tokens"):  # deduplicated, then every row
        encoder = _encoder(requires_grad=True)
        (getattr(encoder, embed)(character_ids) * weights).sum().backward()
        gradients.append([parameter.grad for parameter in encoder.parameters()])
    for deduplicated, every_row in zip(*gradients):
        assert torch.allclose(deduplicated, every_row, atol=1e-10, rtol=0)
    assert any(gradient.abs().sum() > 0 for gradient in gradients[0])
