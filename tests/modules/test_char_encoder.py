import pytest
import torch

from elmo_plugin import batch_to_ids
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.kernels.recorded_products import bfloat16_products
from tests.helpers import ELMO_OPTIONS_FILE, NewTensors, needs_bfloat16

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


def test_training_and_inference_cut_the_distinct_tokens_into_chunks_of_their_own_sizes(monkeypatch):
    from elmo_plugin.modules import char_encoder

    monkeypatch.setattr(char_encoder, "TOKENS_PER_CNN_CHUNK", 2)
    monkeypatch.setattr(char_encoder, "TOKENS_PER_TRAINING_CHUNK", 4)
    character_ids = batch_to_ids(SENTENCES).view(-1, 50)  # 9 distinct rows
    for requires_grad, expected_rows in ((False, [9, 2, 2, 2, 2, 1]), (True, [9, 4, 4, 1])):
        encoder = _encoder(requires_grad=requires_grad)
        rows_embedded = []
        embed_distinct = encoder._embed_distinct_tokens
        encoder._embed_distinct_tokens = lambda ids: rows_embedded.append(len(ids)) or embed_distinct(ids)
        encoder.embed_tokens(character_ids)
        assert rows_embedded == expected_rows
    with torch.no_grad():  # a trainable encoder without gradients is cut as in inference
        rows_embedded.clear()
        encoder.embed_tokens(character_ids)
    assert rows_embedded == [9, 2, 2, 2, 2, 1]


def test_training_in_chunks_gives_the_gradients_of_one_pass(monkeypatch):
    from elmo_plugin.modules import char_encoder

    character_ids = batch_to_ids(SENTENCES).view(-1, 50)
    weights = torch.randn(character_ids.size(0), 1, dtype=torch.float64)
    gradients = []
    for tokens_per_chunk in (4, 1000):
        monkeypatch.setattr(char_encoder, "TOKENS_PER_TRAINING_CHUNK", tokens_per_chunk)
        encoder = _encoder(requires_grad=True)
        (encoder.embed_tokens(character_ids) * weights).sum().backward()
        gradients.append([parameter.grad for parameter in encoder.parameters()])
    for chunked, whole in zip(*gradients):
        assert torch.allclose(chunked, whole, atol=1e-10, rtol=0)


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


def _dense_convolve_and_max_pool(character_ids, table, filters, split_ties):
    """The reference: every window's product, then `torch.max` (AllenNLP) or, with
    `split_ties`, TensorFlow's `reduce_max` gradient (split among the windows that tie)."""
    out_channels, char_dim, width = filters.shape
    rows = torch.nn.functional.embedding(character_ids, table).unfold(1, width, 1)
    products = torch.nn.functional.linear(rows.reshape(*rows.shape[:2], -1), filters.reshape(out_channels, -1))
    if not split_ties:
        return products.max(dim=1)[0]
    maxima = products.amax(dim=1, keepdim=True).detach()
    reaches = (products == maxima).to(products.dtype)
    # The maximum as a tie-weighted mean of the tied windows: its gradient is split among them.
    return (products * reaches).sum(dim=1) / reaches.sum(dim=1)


def _character_ids_with_padding(num_tokens, num_characters=50, num_table_rows=262, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, num_table_rows, (num_tokens, num_characters), generator=generator)
    lengths = torch.randint(1, 8, (num_tokens, 1), generator=generator)
    ids[torch.arange(num_characters) > lengths] = num_table_rows - 1  # identical padding windows
    ids[0] = 0  # a padding token: every window tied
    return ids


@pytest.mark.parametrize("way", ["as on the CPU", "a few tokens per chunk", "as on a GPU"])
def test_convolve_and_max_pool_gives_allennlps_and_bilm_tfs_values_and_parameter_gradients(monkeypatch, way):
    from elmo_plugin.modules import char_encoder
    from elmo_plugin.modules.char_encoder import ConvolveAndMaxPool

    if way == "a few tokens per chunk":
        monkeypatch.setattr(char_encoder, "_CNN_TRAINING_CHUNK_BYTES", 300)
    if way == "as on a GPU":  # all tokens in one chunk, a bin for every character of the table
        monkeypatch.setattr(char_encoder, "_training_chunk_bytes",
                            lambda device: char_encoder._CNN_TRAINING_CHUNK_BYTES_ON_A_GPU)
        monkeypatch.setattr(char_encoder, "_bins_every_character", lambda device, table_rows: True)

    character_ids = _character_ids_with_padding(40)
    for width, out_channels in ((1, 5), (3, 8), (7, 16)):
        table = torch.randn(262, 4, dtype=torch.float64, requires_grad=True)
        filters = torch.randn(out_channels, 4, width, dtype=torch.float64, requires_grad=True)
        gradient = torch.randn(40, out_channels, dtype=torch.float64)
        ours = ConvolveAndMaxPool.apply(character_ids, table, filters)
        our_gradients = torch.autograd.grad(ours, (table, filters), gradient)
        for split_ties in (False, True):
            reference = _dense_convolve_and_max_pool(character_ids, table, filters, split_ties)
            assert torch.allclose(ours, reference, atol=1e-12, rtol=0)
            reference_gradients = torch.autograd.grad(reference, (table, filters), gradient)
            for our_gradient, reference_gradient in zip(our_gradients, reference_gradients):
                assert torch.allclose(our_gradient, reference_gradient, atol=1e-10, rtol=0)
        assert our_gradients[0].abs().sum() > 0 and our_gradients[1].abs().sum() > 0


def test_convolve_and_max_pool_passes_gradcheck_and_handles_large_tables_and_many_windows():
    from elmo_plugin.modules.char_encoder import ConvolveAndMaxPool

    # A table of thousands of rows of which few occur (ELMoForManyLangs), and more windows
    # than a byte can number (their positions then in wider integers).
    for num_table_rows, num_characters, width in ((5000, 12, 3), (40, 300, 2)):
        character_ids = torch.randint(0, num_table_rows, (3, num_characters), generator=torch.Generator().manual_seed(1))
        table = torch.randn(num_table_rows, 3, dtype=torch.float64, requires_grad=True)
        filters = torch.randn(4, 3, width, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(ConvolveAndMaxPool.apply, (character_ids, table, filters))
        gradient = torch.randn(3, 4, dtype=torch.float64)
        reference = _dense_convolve_and_max_pool(character_ids, table, filters, split_ties=False)
        ours = ConvolveAndMaxPool.apply(character_ids, table, filters)
        for our_gradient, reference_gradient in zip(
            torch.autograd.grad(ours, (table, filters), gradient),
            torch.autograd.grad(reference, (table, filters), gradient),
        ):
            assert torch.allclose(our_gradient, reference_gradient, atol=1e-10, rtol=0)


def test_a_frozen_character_table_gets_no_gradient_from_the_cnn():
    from elmo_plugin.modules.char_encoder import ConvolveAndMaxPool

    table = torch.randn(262, 4)
    filters = torch.randn(6, 4, 2, requires_grad=True)
    pooled = ConvolveAndMaxPool.apply(_character_ids_with_padding(5), table, filters)
    pooled.sum().backward()
    assert table.grad is None and filters.grad is not None


def test_training_and_inference_give_the_same_token_vectors():
    character_ids = batch_to_ids(SENTENCES).view(-1, 50)
    encoder = _encoder(requires_grad=True)
    trained_path = encoder.embed_tokens(character_ids)
    with torch.no_grad():
        inference_path = encoder.embed_tokens(character_ids)
    assert trained_path.requires_grad and not inference_path.requires_grad
    assert torch.allclose(trained_path, inference_path, atol=1e-12, rtol=0)


def test_a_maximum_that_different_windows_tie_for_gives_its_gradient_to_the_last_of_them():
    from elmo_plugin.modules.char_encoder import ConvolveAndMaxPool

    # Characters 1 and 2 give the one width-1 filter the same value (products rounded to
    # bfloat16 tie like this far more often than float32's); the padding character 3 less.
    table = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], requires_grad=True)
    filters = torch.ones(1, 2, 1)
    ConvolveAndMaxPool.apply(torch.tensor([[1, 2, 3, 3]]), table, filters).sum().backward()
    assert table.grad[:, 0].tolist() == [0.0, 0.0, 1.0, 0.0]


@needs_bfloat16
def test_bfloat16_products_are_max_pooled_as_they_come_without_a_float32_copy():
    from elmo_plugin.modules.char_encoder import ConvolveAndMaxPool

    character_ids = _character_ids_with_padding(40)
    table = torch.randn(262, 4, requires_grad=True)
    filters = torch.randn(16, 4, 7, requires_grad=True)
    with NewTensors() as made, bfloat16_products():
        pooled = ConvolveAndMaxPool.apply(character_ids, table, filters)
    # (tokens x windows, out_channels), oneDNN's rows padded (to 1,792)
    products_sized = [dtype for shape, dtype in made.made if shape[1:] == (16,) and shape[0] >= 40 * 44]
    assert products_sized and torch.float32 not in products_sized
    assert pooled.dtype == torch.float32
    # The same maxima as float32's products rounded from the same bfloat16 operands give.
    rounded_table, rounded_filters = table.detach().bfloat16().float(), filters.detach().bfloat16().float()
    reference = _dense_convolve_and_max_pool(character_ids, rounded_table, rounded_filters, split_ties=False)
    assert torch.allclose(pooled, reference, rtol=2**-8, atol=0)
