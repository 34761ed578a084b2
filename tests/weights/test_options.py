import json

import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.common.testing import AllenNlpTestCase

from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import ELMO_OPTIONS_FILE, fixture_options


class TestElmoOptions(AllenNlpTestCase):
    def write(self, content) -> str:
        path = self.TEST_DIR / "options.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return str(path)

    def test_reads_the_fixture(self):
        options = ElmoOptions.from_file(ELMO_OPTIONS_FILE)
        assert options.filters == [(1, 4), (2, 8), (3, 16), (4, 32), (5, 64)]
        assert options.n_filters == 124
        assert (options.cell_dim, options.projection_dim, options.n_layers) == (64, 16, 2)
        assert (options.cell_clip, options.proj_clip) == (3.0, 3.0)
        assert options.use_skip_connections and options.output_dim == 32

    def test_round_trip_keeps_unknown_keys(self):
        raw = fixture_options()
        raw["n_epochs"] = 10
        raw["lstm"]["unroll_steps"] = 20
        assert ElmoOptions.from_dict(raw).to_dict() == raw

    def test_missing_key_is_named(self):
        raw = fixture_options()
        del raw["lstm"]["projection_dim"]
        path = self.write(raw)
        with pytest.raises(ConfigurationError, match=r"options\.json is missing the key 'lstm\.projection_dim'"):
            ElmoOptions.from_file(path)

    def test_missing_section_is_named(self):
        raw = fixture_options()
        del raw["lstm"]
        with pytest.raises(ConfigurationError, match="lstm.dim"):
            ElmoOptions.from_file(self.write(raw))
        raw = fixture_options()
        del raw["char_cnn"]["filters"]
        with pytest.raises(ConfigurationError, match="char_cnn.filters"):
            ElmoOptions.from_file(self.write(raw))

    def test_without_char_cnn_the_bilm_reads_words(self):
        raw = fixture_options()
        del raw["char_cnn"]
        raw.update(n_tokens_vocab=7, share_embedding_softmax=True)
        options = ElmoOptions.from_file(self.write(raw))
        assert options.word_inputs and options.n_tokens_vocab == 7 and options.share_embedding_softmax
        assert options.to_dict() == raw
        assert "n_tokens_vocab" not in options.extra
        assert not ElmoOptions.from_dict(fixture_options()).word_inputs

    def test_tying_needs_word_inputs(self):
        raw = dict(fixture_options(), share_embedding_softmax=True)
        with pytest.raises(ConfigurationError, match="share_embedding_softmax .* needs a word-input biLM"):
            ElmoOptions.from_file(self.write(raw))

    def test_bad_values_are_named(self):
        for section, key, value, message in [
            ("char_cnn", "activation", "gelu", "char_cnn.activation"),
            ("char_cnn", "filters", [[1, 4], [2]], r"char_cnn.filters\[1\]"),
            ("char_cnn", "n_characters", 300, "n_characters"),
            ("lstm", "n_layers", 0, "lstm.n_layers"),
            ("lstm", "cell_clip", "3", "lstm.cell_clip"),
            ("lstm", "use_skip_connections", "yes", "use_skip_connections"),
        ]:
            raw = fixture_options()
            raw[section][key] = value
            with pytest.raises(ConfigurationError, match=message):
                ElmoOptions.from_file(self.write(raw))

    def test_optional_keys_follow_bilm_tf(self):
        raw = fixture_options()
        for key in ("cell_clip", "proj_clip", "use_skip_connections"):
            del raw["lstm"][key]
        options = ElmoOptions.from_dict(raw)
        assert options.cell_clip is None and options.proj_clip is None
        assert not options.use_skip_connections

    def test_not_json(self):
        with pytest.raises(ConfigurationError, match="not valid JSON"):
            ElmoOptions.from_file(self.write("{not json"))

    def test_missing_file(self):
        with pytest.raises(ConfigurationError, match="options file .*nowhere.json does not exist"):
            ElmoOptions.from_file(str(self.TEST_DIR / "nowhere.json"))
