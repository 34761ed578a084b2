"""
Sentence vectors (`--sentence-vectors mean|unit-mean`, `ElmoEmbedder.embed_sentence_vectors`)
and layer mixes (`--mix`), against a direct computation in float64 from the token vectors: in
every output format, for empty lines and for sentences read in segments.
"""
import json

import numpy
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
from elmo_plugin.inference.output_vectors import LayerMix
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, read_hdf5
from tests.inference.test_embed_file import EmbedFileTestCase

LINES = ["The cat sat on the mat .", "", "A dog", " ".join(f"w{j % 17}" for j in range(90)), "x"]
WEIGHTS, GAMMA = (0.1, 0.5, -0.3), 1.25


def token_vectors():
    """Every line's layers, float64, read whole (deterministic mode)."""
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    return [layers.astype(numpy.float64) for layers in embedder.embed_batch([line.split() for line in LINES])]


def mixed(layers):
    softmax = numpy.exp(WEIGHTS) / numpy.exp(WEIGHTS).sum()
    return GAMMA * sum(weight * layer for weight, layer in zip(softmax, layers))


def reduced(layers, output_format):
    return {"all": layers, "top": layers[-1], "average": layers.mean(axis=0), "mix": mixed(layers)}[output_format]


def sentence_vector(layers, output_format, mode):
    chosen = reduced(layers, output_format)
    tokens = chosen.shape[-2]
    mean = chosen.sum(axis=-2) / tokens if tokens else numpy.zeros(chosen.shape[:-2] + chosen.shape[-1:])
    if mode == "unit-mean":
        norm = numpy.linalg.norm(mean, axis=-1, keepdims=True)
        mean = numpy.where(norm > 0, mean / numpy.where(norm > 0, norm, 1), 0)
    return mean


class TestTheFileEngine(EmbedFileTestCase):
    @pytest.mark.parametrize("output_format", ["all", "top", "average", "mix"])
    @pytest.mark.parametrize("mode", [None, "mean", "unit-mean"])
    def test_vectors_equal_the_direct_computation(self, output_format, mode):
        path = self.write_input(LINES)
        # A budget of 32 positions: the 90-token line is read in segments.
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, max_tokens_per_batch=32)
        mix = f"{','.join(map(str, WEIGHTS))}:{GAMMA}" if output_format == "mix" else None
        actual = read_hdf5(self.embed(path, embedder=embedder, output_format=output_format, mix=mix,
                                      sentence_vectors=mode, allow_empty_lines=True, chunk_size=2))
        for index, layers in enumerate(token_vectors()):
            expected = sentence_vector(layers, output_format, mode) if mode else reduced(layers, output_format)
            assert actual[str(index)].shape == expected.shape
            numpy.testing.assert_allclose(actual[str(index)], expected, atol=2e-6, rtol=1e-6, err_msg=str(index))
        if mode:
            assert not actual["1"].any()  # the empty line: zeros
        if mode == "unit-mean":
            assert numpy.allclose(numpy.linalg.norm(actual["0"], axis=-1), 1.0)

    def test_a_scalar_mix_json_as_elmo_import_writes_it(self):
        path = self.write_input(LINES[:1])
        mix_file = self.TEST_DIR / "scalar_mix.json"
        mix_file.write_text(json.dumps({"scalar_mix_parameters": list(WEIGHTS), "gamma": GAMMA}))
        actual = read_hdf5(self.embed(path, output_format="mix", mix=str(mix_file)))
        numpy.testing.assert_allclose(actual["0"], mixed(token_vectors()[0]), atol=2e-6)

    def test_a_resumed_run_refuses_other_vectors(self):
        from tests.inference.test_embed_file import interrupt_after

        path = self.write_input(LINES[:1] + LINES[2:])
        output = str(self.TEST_DIR / "out.hdf5")
        embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
        interrupt_after(embedder, 1)
        with pytest.raises(KeyboardInterrupt):
            embedder.embed_file(path, output, chunk_size=1)  # token vectors
        with pytest.raises(ConfigurationError, match="started with different sentence_vectors"):
            ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(
                path, output, chunk_size=1, resume=True, sentence_vectors="mean")


@pytest.mark.parametrize("mode", ["mean", "unit-mean"])
@pytest.mark.parametrize("output_format", ["all", "mix"])
def test_the_python_api_gives_the_same_vectors(mode, output_format):
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    mix = LayerMix(WEIGHTS, GAMMA) if output_format == "mix" else None
    sentences = [line.split() for line in LINES]
    batch = embedder.embed_batch_sentence_vectors(sentences, mode, output_format, mix)
    lazy = list(embedder.embed_sentence_vectors(iter(sentences), 2, mode, output_format, mix))
    for layers, eager, streamed in zip(token_vectors(), batch, lazy):
        expected = sentence_vector(layers, output_format, mode)
        numpy.testing.assert_allclose(eager, expected, atol=2e-6, rtol=1e-6)
        numpy.testing.assert_allclose(eager, streamed, atol=1e-6)  # other batches: float rounding


@pytest.mark.parametrize("options, message", [
    ({"output_format": "mix", "mix": "0.1,0.2"}, "mix: 2 weights for a biLM of 3 layers"),
    ({"output_format": "mix", "mix": "0.1,nan,0.2"}, "must be finite numbers"),
    ({"output_format": "mix", "mix": "a,b,c"}, "expected comma-separated layer weights"),
    ({"output_format": "all", "mix": "0.1,0.2,0.3"}, "give the layer weights .* as the output format"),
    ({"sentence_vectors": "median"}, "sentence_vectors must be one of"),
])
def test_bad_mixes_and_modes_are_refused_before_any_work(tmp_path, options, message):
    (tmp_path / "in.txt").write_text("a b\n")
    with pytest.raises(ConfigurationError, match=message):
        ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(
            str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
