
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.testing import AllenNlpTestCase
from allennlp.modules.elmo import _ElmoBiLm as AllenNlpElmoBiLm

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import (
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    ORACLE_ARCHITECTURES,
    fixture_options,
)
from tests.modules.oracle import (
    check_bilm_equals_allennlp,
    check_top_layer_matches_tensorflow,
    write_architecture,
)


class TestReferenceActivations(AllenNlpTestCase):
    """The biLM reproduces the outputs of the original TensorFlow code (AllenNLP's own test)."""

    def test_top_layer_matches_tensorflow(self):
        check_top_layer_matches_tensorflow(torch.device("cpu"))


@pytest.mark.parametrize("architecture", sorted(ORACLE_ARCHITECTURES))
def test_bilm_equals_allennlp_over_carried_state_batches(architecture, tmp_path):
    options_file, weight_file = write_architecture(
        tmp_path, ORACLE_ARCHITECTURES[architecture](), seed=11
    )
    check_bilm_equals_allennlp(options_file, weight_file, torch.device("cpu"))


class TestElmoBiLm(AllenNlpTestCase):
    def test_parameter_names_match_allennlp_archives(self):
        ours = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        theirs = AllenNlpElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        ours.load_state_dict(theirs.state_dict(), strict=True)
        for name, parameter in theirs.named_parameters():
            assert torch.equal(parameter, dict(ours.named_parameters())[name])

    def test_output_shapes(self):
        bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        output = bilm(batch_to_ids([["a", "b", "c"], ["d"]]))
        assert bilm.num_layers == 3 and bilm.get_output_dim() == 32
        assert [tuple(a.shape) for a in output["activations"]] == [(2, 5, 32)] * 3
        assert output["mask"].tolist() == [[True] * 5, [True, True, True, False, False]]

    def test_reset_states(self):
        bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        ids = batch_to_ids([["a", "b"]])
        first = bilm(ids)["activations"][2]
        assert not torch.allclose(bilm(ids)["activations"][2], first)
        bilm.reset_states()
        assert torch.equal(bilm(ids)["activations"][2], first)

    def test_biLM_without_residual_connections(self):
        # AllenNLP refuses these biLMs; bilm-tf trains them. Without residuals the top layer is
        # the second LSTM's output alone.
        raw = fixture_options()
        raw["lstm"]["use_skip_connections"] = False
        plain = ElmoBiLm(ElmoOptions.from_dict(raw), ELMO_WEIGHT_FILE, stateful=False)
        residual = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
        ids = batch_to_ids([["no", "skip", "here"]])
        output = plain(ids)
        layers = output["activations"]
        assert not torch.allclose(layers[2], residual(ids)["activations"][2])
        start_h, start_c = plain.start_state()
        for half, cell in ((slice(0, 16), plain._elmo_lstm.forward_layers[1]),
                           (slice(16, 32), plain._elmo_lstm.backward_layers[1])):
            cell_half = slice(0, 64) if half.start == 0 else slice(64, 128)
            expected, _ = cell(
                layers[1][:, :, half], output["mask"], (start_h[1, :, half], start_c[1, :, cell_half])
            )
            torch.testing.assert_close(layers[2][:, :, half], expected, rtol=0, atol=1e-6)


class TestDeterministicMode(AllenNlpTestCase):
    def setup_method(self):
        super().setup_method()
        self.bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
        self.sentence = ["The", "bats", "hang", "upside", "down", "."]

    def layers_of(self, batch, row):
        output = self.bilm(batch_to_ids(batch))
        length = len(batch[row]) + 2
        return [layer[row, :length] for layer in output["activations"]]

    def test_same_vectors_alone_in_other_batches_and_orders(self):
        alone = self.layers_of([self.sentence], 0)
        others = [["a", "much", "longer", "sentence", "with", "many", "more", "tokens", "in", "it"], ["x"]]
        for batch, row in [
            (others + [self.sentence], 2),
            ([self.sentence] + others, 0),
            ([others[1], self.sentence], 1),
            ([self.sentence] * 4, 3),
        ]:
            for _ in range(2):  # the second pass would see carried state, if there were any
                for expected, actual in zip(alone, self.layers_of(batch, row)):
                    # Row results of a matrix product can differ in the last bit between
                    # batch sizes (different kernels); in float32 that is ~1e-7.
                    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)

    def test_identical_in_float64(self):
        self.bilm = self.bilm.double()
        alone = self.layers_of([self.sentence], 0)
        in_batch = self.layers_of([["some", "other", "words", "x", "y", "z", "w"], self.sentence], 1)
        for expected, actual in zip(alone, in_batch):
            torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)

    def test_start_state_is_the_between_sentence_fixed_point(self):
        start = self.bilm.start_state()
        empty = self.bilm._token_embedder(batch_to_ids([[]]))
        _, after_empty_sentence = self.bilm._elmo_lstm.forward_with_state(empty["token_embedding"], empty["mask"], start)
        for before, after in zip(start, after_empty_sentence):
            assert (before - after).abs().max() < 1e-5
            assert before.abs().max() > 0.01  # a warm state, not zeros

    def test_start_state_follows_parameter_updates(self):
        bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, requires_grad=True, stateful=False)
        before = [s.clone() for s in bilm.start_state()]
        with torch.no_grad():
            bilm._elmo_lstm.forward_layer_0.state_linearity.bias.add_(0.5)
        after = bilm.start_state()
        assert not torch.allclose(before[0], after[0])


def test_copies_and_pickles_compute_what_the_original_does():
    import copy
    import io

    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False, precision="int8")
    ids = batch_to_ids([["The", "bats", "hang"], ["x"]])
    with torch.no_grad():
        expected = bilm(ids)["activations"]
    buffer = io.BytesIO()
    torch.save(bilm, buffer)  # flair pickles whole embedders
    buffer.seek(0)
    for copied in (copy.deepcopy(bilm), torch.load(buffer, weights_only=False)):
        assert copied.precision == "int8" and copied.kernels is copied.lstm.kernels
        with torch.no_grad():
            for ours, theirs in zip(copied(ids)["activations"], expected):
                assert torch.equal(ours, theirs)


def test_a_bilm_from_weights_already_read_is_the_one_from_its_files():
    from elmo_plugin.modules.settings import ElmoSettings
    from elmo_plugin.weights.formats import read_bilm_weights

    weights = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    settings = ElmoSettings(stateful=False)
    from_weights = ElmoBiLm.from_weights(weights.options, weights, settings)
    from_files = ElmoBiLm.from_settings(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, settings)
    ids = batch_to_ids([["The", "cat"], ["a"]])
    with torch.no_grad():
        for ours, theirs in zip(from_weights(ids)["activations"], from_files(ids)["activations"]):
            assert torch.equal(ours, theirs)
    with pytest.raises(ConfigurationError, match="needs weights"):
        ElmoBiLm.from_weights(weights.options, None)
