import pytest
import torch
from allennlp.common.testing import AllenNlpTestCase
from allennlp.modules.elmo import Elmo as AllenNlpElmo

from elmo_plugin import Elmo, batch_to_ids
from tests.helpers import CARRIED_STATE_BATCHES, ORACLE_ARCHITECTURES
from tests.modules.oracle import (
    FLOAT64_TOLERANCE,
    assert_float32_within_noise,
    check_elmo_gradients_equal_allennlp,
    max_difference,
    write_architecture,
)

VOCABULARY = ["@@PADDING@@", "@@UNKNOWN@@", "The", "cat", "sat", ".", "A", "dog", "one"]

ELMO_VARIANTS = {
    "plain": {"num_output_representations": 1},
    "layer_norm": {"num_output_representations": 1, "do_layer_norm": True},
    "two_representations": {"num_output_representations": 2},
    "fixed_scalar_mix": {"num_output_representations": 1, "scalar_mix_parameters": [-1.0, 0.5, 2.0, 0.1]},
    "keep_sentence_boundaries": {"num_output_representations": 1, "keep_sentence_boundaries": True},
    "vocab_to_cache": {"num_output_representations": 1, "vocab_to_cache": VOCABULARY},
}


def word_ids(batch):
    index = {word: i for i, word in enumerate(VOCABULARY)}
    length = max(len(sentence) for sentence in batch)
    # Words outside VOCABULARY get the unknown id 1, as an AllenNLP vocabulary gives them.
    return torch.tensor(
        [[index.get(word, 1) for word in sentence] + [0] * (length - len(sentence)) for sentence in batch]
    )


def run_elmo(elmo_class, options_file, weight_file, dtype, variant, batches, with_word_ids=False):
    elmo = elmo_class(options_file, weight_file, dropout=0.0, **ELMO_VARIANTS[variant]).to(dtype)
    if variant == "vocab_to_cache":
        # Both compute the cache at construction, in float32 and with different batch shapes;
        # recompute it in the precision under test so that float64 compares float64 math.
        elmo._elmo_lstm.create_cached_cnn_embeddings(VOCABULARY)
    torch.manual_seed(0)
    # Trainable scalar mixes start equal: move them so that the weighting itself is tested.
    with torch.no_grad():
        for name, parameter in elmo.named_parameters():
            if "scalar_parameters" in name and parameter.requires_grad:
                parameter.uniform_(-1, 1)
            if name.endswith("gamma") and parameter.requires_grad:
                parameter.fill_(1.3)
    outputs = []
    for batch in batches:
        result = elmo(batch_to_ids(batch), word_ids(batch) if with_word_ids else None)
        outputs.append(([r.detach() for r in result["elmo_representations"]], result["mask"]))
    return outputs


def compare(options_file, weight_file, variant, batches, with_word_ids=False):
    results = {
        (name, dtype): run_elmo(cls, options_file, weight_file, dtype, variant, batches, with_word_ids)
        for name, cls in (("ours", Elmo), ("theirs", AllenNlpElmo))
        for dtype in (torch.float64, torch.float32)
    }
    for index in range(len(batches)):
        ours64, our_mask = results["ours", torch.float64][index]
        theirs64, their_mask = results["theirs", torch.float64][index]
        assert torch.equal(our_mask, their_mask)
        assert max_difference(ours64, theirs64) <= FLOAT64_TOLERANCE
        assert_float32_within_noise(
            results["ours", torch.float32][index][0], results["theirs", torch.float32][index][0], theirs64
        )


@pytest.mark.parametrize("architecture", sorted(ORACLE_ARCHITECTURES))
def test_elmo_equals_allennlp(architecture, tmp_path):
    options_file, weight_file = write_architecture(tmp_path, ORACLE_ARCHITECTURES[architecture](), seed=5)
    compare(options_file, weight_file, "plain", CARRIED_STATE_BATCHES)


@pytest.mark.parametrize("variant", sorted(ELMO_VARIANTS))
def test_elmo_variants_equal_allennlp(variant, tmp_path):
    options_file, weight_file = write_architecture(tmp_path, ORACLE_ARCHITECTURES["tanh_3_layers"](), seed=6)
    compare(options_file, weight_file, variant, CARRIED_STATE_BATCHES, with_word_ids=variant == "vocab_to_cache")


class TestElmo(AllenNlpTestCase):
    def setup_method(self):
        super().setup_method()
        self.options_file, self.weight_file = write_architecture(
            self.TEST_DIR, ORACLE_ARCHITECTURES["fixture"](), seed=7
        )

    def test_four_dimensional_input_equals_allennlp(self):
        sentences = [["a", "b", "c"], ["d"], ["e", "f"], []]
        ids = batch_to_ids(sentences).view(2, 2, 3, 50)
        for dtype in (torch.float64,):
            ours = Elmo(self.options_file, self.weight_file, 2, dropout=0.0).to(dtype)
            theirs = AllenNlpElmo(self.options_file, self.weight_file, 2, dropout=0.0).to(dtype)
            ours_output, theirs_output = ours(ids), theirs(ids)
            assert ours_output["mask"].shape == (2, 2, 3)
            assert torch.equal(ours_output["mask"], theirs_output["mask"])
            assert ours_output["elmo_representations"][0].shape == (2, 2, 3, 32)
            assert max_difference(
                ours_output["elmo_representations"], theirs_output["elmo_representations"]
            ) <= FLOAT64_TOLERANCE

    def test_four_dimensional_input_with_sentence_boundaries(self):
        # AllenNLP cannot reshape this case; ours keeps the two extra positions.
        ids = batch_to_ids([["a", "b"], ["c"], [], ["d", "e"]]).view(2, 2, 2, 50)
        elmo = Elmo(self.options_file, self.weight_file, 1, keep_sentence_boundaries=True)
        output = elmo(ids)
        assert output["elmo_representations"][0].shape == (2, 2, 4, 32)
        assert output["mask"].shape == (2, 2, 4)

    def test_gradients_equal_allennlp(self):
        check_elmo_gradients_equal_allennlp(self.options_file, self.weight_file, torch.device("cpu"))

    def test_frozen_by_default(self):
        elmo = Elmo(self.options_file, self.weight_file, 1)
        frozen = {n for n, p in elmo.named_parameters() if not p.requires_grad}
        assert frozen == {n for n, _ in elmo.named_parameters() if not n.startswith("scalar_mix")}

    def test_unknown_word_ids_beyond_the_cache_fall_back_to_characters(self):
        batch = [["The", "cat"], ["dog", "sat"]]
        cached = Elmo(self.options_file, self.weight_file, 1, dropout=0.0, vocab_to_cache=VOCABULARY,
                      stateful=False)
        plain = Elmo(self.options_file, self.weight_file, 1, dropout=0.0, stateful=False)
        with torch.no_grad():
            for mix in ("scalar_mix_0.scalar_parameters.0", "scalar_mix_0.scalar_parameters.2"):
                dict(cached.named_parameters())[mix].fill_(0.7)
                dict(plain.named_parameters())[mix].fill_(0.7)
        expected = plain(batch_to_ids(batch))["elmo_representations"][0]
        # Known words: the cached vectors are the char CNN's own.
        from_words = cached(batch_to_ids(batch), word_ids(batch))["elmo_representations"][0]
        torch.testing.assert_close(from_words, expected, rtol=0, atol=1e-6)
        # Ids the cache does not hold: the characters are used instead.
        out_of_range = torch.tensor([[2, 3], [len(VOCABULARY) + 5, 4]])
        fallback = cached(batch_to_ids(batch), out_of_range)["elmo_representations"][0]
        torch.testing.assert_close(fallback, expected, rtol=0, atol=1e-6)

    def test_resetting_through_allennlps_attribute_path(self):
        # AllenNLP 2.x code resets the carried state as `elmo._elmo_lstm._elmo_lstm.reset_states()`.
        elmo = Elmo(self.options_file, self.weight_file, 1, dropout=0.0)
        ids = batch_to_ids([["a", "b", "c"], ["d"]])
        first = elmo(ids)["elmo_representations"][0]
        assert not torch.allclose(elmo(ids)["elmo_representations"][0], first)
        elmo._elmo_lstm._elmo_lstm.reset_states()
        assert torch.equal(elmo(ids)["elmo_representations"][0], first)

    def test_module_argument(self):
        elmo = Elmo(self.options_file, self.weight_file, 1)
        shared = Elmo(None, None, 1, module=elmo._elmo_lstm)
        assert shared._elmo_lstm is elmo._elmo_lstm
        with pytest.raises(Exception, match="Don't provide options_file or weight_file with module"):
            Elmo(self.options_file, None, 1, module=elmo._elmo_lstm)
