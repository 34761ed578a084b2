import torch

from elmo_plugin import batch_to_ids
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE

SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog"], ["a", "cat", "!"]]


def _encoder(requires_grad: bool = False) -> ElmoCharacterEncoder:
    torch.manual_seed(0)
    return ElmoCharacterEncoder(ElmoOptions.from_file(ELMO_OPTIONS_FILE), requires_grad=requires_grad).double()


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


def test_allennlps_signature_reproduces_the_tensorflow_token_embeddings():
    # AllenNLP's `_ElmoCharacterEncoder(options_file, weight_file)`, against bilm-tf's
    # `dump_token_embeddings` output for the fixture vocabulary.
    import h5py
    import numpy
    from allennlp.nn.util import remove_sentence_boundaries

    from tests.helpers import ELMO_FIXTURES, ELMO_WEIGHT_FILE

    words = (ELMO_FIXTURES / "vocab_test.txt").read_text().strip().split("\n")
    encoder = ElmoCharacterEncoder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    sentences = [words[start : start + 50] for start in range(0, len(words), 50)]
    output = encoder(batch_to_ids(sentences))
    vectors, mask = remove_sentence_boundaries(output["token_embedding"], output["mask"])
    actual = vectors[mask].detach().numpy()
    with h5py.File(ELMO_FIXTURES / "elmo_token_embeddings.hdf5", "r") as handle:
        expected = handle["embedding"][...]
    assert actual.shape == expected.shape
    assert numpy.allclose(actual, expected, atol=1e-6)


def test_the_added_sentence_boundaries_are_the_boundary_tokens():
    from tests.helpers import ELMO_WEIGHT_FILE

    encoder = ElmoCharacterEncoder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    for position, token in ((0, "<S>"), (2, "</S>")):
        embedded = encoder(batch_to_ids([[token]]))["token_embedding"][0]
        torch.testing.assert_close(embedded[position], embedded[1], rtol=0, atol=1e-6)


def test_a_word_input_biLM_is_refused_by_name():
    import pytest
    from allennlp.common.checks import ConfigurationError

    options = ElmoOptions.from_dict({"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1}})
    with pytest.raises(ConfigurationError, match="needs a character-input biLM"):
        ElmoCharacterEncoder(options)


def test_max_pooling_without_ties_has_torch_max_values_and_gradients():
    from elmo_plugin.modules.char_encoder import MaxOverPositions

    products = torch.randn(5, 9, 7, dtype=torch.float64, requires_grad=True)
    gradient = torch.randn(5, 7, dtype=torch.float64)
    ours, = torch.autograd.grad(MaxOverPositions.apply(products), products, gradient)
    reference = torch.max(products, dim=1)[0]
    theirs, = torch.autograd.grad(reference, products, gradient)
    assert torch.equal(MaxOverPositions.apply(products), reference)
    assert torch.equal(ours, theirs)
    assert torch.autograd.gradcheck(MaxOverPositions.apply, (products,))


def test_max_pooling_splits_a_gradient_equally_among_tied_positions_as_bilm_tf():
    from elmo_plugin.modules.char_encoder import MaxOverPositions

    # Token 0: filter 0 peaks at positions 0 and 2, filter 1 at position 1 only. Token 1: the
    # same value at all three positions (padding windows), 300 positions (counts above a byte).
    products = torch.tensor([[[2.0, 0.0], [1.0, 5.0], [2.0, 4.0]], [[3.0, 3.0]] * 3], requires_grad=True)
    gradient = torch.tensor([[6.0, 1.0], [3.0, 9.0]])
    pooled = MaxOverPositions.apply(products)
    assert pooled.tolist() == [[2.0, 5.0], [3.0, 3.0]]
    pooled.backward(gradient)
    assert products.grad.tolist() == [[[3.0, 0.0], [0.0, 1.0], [3.0, 0.0]], [[1.0, 3.0]] * 3]
    long = torch.zeros(1, 300, 1, requires_grad=True)
    MaxOverPositions.apply(long).backward(torch.tensor([[300.0]]))
    assert torch.equal(long.grad, torch.ones(1, 300, 1))


def test_training_and_inference_give_the_same_token_vectors():
    character_ids = batch_to_ids(SENTENCES).view(-1, 50)
    encoder = _encoder(requires_grad=True)
    trained_path = encoder.embed_tokens(character_ids)
    with torch.no_grad():
        inference_path = encoder.embed_tokens(character_ids)
    assert trained_path.requires_grad and not inference_path.requires_grad
    assert torch.allclose(trained_path, inference_path, atol=1e-12, rtol=0)
