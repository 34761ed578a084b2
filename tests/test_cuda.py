"""
ELMo on a GPU: the same oracle checks as on the CPU, run on CUDA tensors.

Skipped where torch sees no GPU, which includes CI (it has none). Run them on a machine with
one: `python -m pytest tests/test_cuda.py` (BENCHMARKS.md says when they last ran, and where).
Float32 here means float32: TF32, which cuDNN's convolutions use by default, is turned off,
since its 10-bit mantissa is far outside the 1e-6 that the TensorFlow fixture demands.
"""
import json

import h5py
import numpy
import pytest
import torch
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.modules.elmo import Elmo as AllenNlpElmo
from allennlp.modules.elmo import _ElmoBiLm as AllenNlpElmoBiLm
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin import Elmo, ElmoBiLm, ElmoEmbedder, batch_to_ids
from elmo_plugin.commands.export import export_bilm_model
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import (
    BILM_CONFIGS,
    CARRIED_STATE_BATCHES,
    ELMO_FIXTURES,
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    ORACLE_ARCHITECTURES,
    bilm_data_overrides,
)
from tests.modules.oracle import (
    FLOAT64_TOLERANCE,
    assert_float32_within_noise,
    max_difference,
    write_architecture,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def strict_float32():
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        yield
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32


def test_top_layer_matches_tensorflow_on_the_gpu():
    with open(ELMO_FIXTURES / "sentences.json") as sentences_handle:
        sentences = json.load(sentences_handle)
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).to(CUDA)
    for i in range(10):
        batch = [sentences[k][i].split() for k in range(3)]
        output = bilm(batch_to_ids(batch).to(CUDA))
        top_layer, mask = remove_sentence_boundaries(output["activations"][2], output["mask"])
        assert top_layer.device.type == "cuda"
        for k in range(3):
            with h5py.File(ELMO_FIXTURES / f"lm_embeddings_{k}.hdf5", "r") as handle:
                expected = numpy.concatenate(handle[str(i)][...], axis=-1)
            actual = top_layer[k, : len(batch[k])].detach().cpu().numpy()
            assert numpy.allclose(actual, expected, atol=1e-6)


@pytest.mark.parametrize("architecture", sorted(ORACLE_ARCHITECTURES))
def test_bilm_equals_allennlp_on_the_gpu(architecture, tmp_path):
    options_file, weight_file = write_architecture(
        tmp_path, ORACLE_ARCHITECTURES[architecture](), seed=11
    )
    batches = [batch_to_ids(batch).to(CUDA) for batch in CARRIED_STATE_BATCHES]
    outputs = {}
    for name, bilm_class in (("ours", ElmoBiLm), ("theirs", AllenNlpElmoBiLm)):
        for dtype in (torch.float64, torch.float32):
            bilm = bilm_class(options_file, weight_file).to(CUDA, dtype)
            outputs[name, dtype] = [
                [activation.detach() for activation in bilm(ids)["activations"]] for ids in batches
            ]
    for index in range(len(batches)):
        reference = outputs["theirs", torch.float64][index]
        assert max_difference(outputs["ours", torch.float64][index], reference) <= FLOAT64_TOLERANCE
        assert_float32_within_noise(
            outputs["ours", torch.float32][index], outputs["theirs", torch.float32][index], reference
        )


def test_elmo_gradients_equal_allennlp_on_the_gpu(tmp_path):
    options_file, weight_file = write_architecture(
        tmp_path, ORACLE_ARCHITECTURES["fixture"](), seed=7
    )
    batches = [batch_to_ids(batch).to(CUDA) for batch in CARRIED_STATE_BATCHES]
    gradients = {}
    for name, elmo_class in (("ours", Elmo), ("theirs", AllenNlpElmo)):
        elmo = elmo_class(options_file, weight_file, 1, requires_grad=True, dropout=0.0)
        elmo = elmo.to(CUDA, torch.float64)
        generator = torch.Generator(device=CUDA).manual_seed(1)
        for ids in batches:
            representation = elmo(ids)["elmo_representations"][0]
            weights = torch.randn(
                representation.shape, dtype=torch.float64, device=CUDA, generator=generator
            )
            (representation * weights).sum().backward()
        gradients[name] = {key: p.grad for key, p in elmo.named_parameters()}
    assert set(gradients["ours"]) == set(gradients["theirs"])
    for key, gradient in gradients["theirs"].items():
        torch.testing.assert_close(gradients["ours"][key], gradient, rtol=1e-9, atol=1e-9, msg=key)


def test_bfloat16_runs_on_the_gpu_and_int8_is_refused_there():
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False).to(CUDA)
    ids = batch_to_ids([["The", "cat", "sat", "."], ["A", "dog"]]).to(CUDA)
    with torch.no_grad():
        reference = bilm(ids)["activations"]
        bilm.set_precision("bfloat16")
        reduced = bilm(ids)["activations"]
    mask = reference[0].abs().sum(-1) > 0
    for expected, actual in zip(reference, reduced):
        assert actual.dtype == torch.float32 and not torch.equal(expected, actual)
        cosine = torch.nn.functional.cosine_similarity(expected[mask], actual[mask], dim=-1)
        assert cosine.mean().item() > 0.999
    with pytest.raises(ConfigurationError, match="'int8' runs on the CPU only"):
        bilm.set_precision("int8")


def test_embedder_on_the_gpu_gives_the_cpu_vectors():
    sentences = [["The", "bats", "hang", "upside", "down"], ["x"], []]
    on_cpu = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_batch(sentences)
    on_gpu = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, cuda_device=0).embed_batch(sentences)
    for cpu_vectors, gpu_vectors in zip(on_cpu, on_gpu):
        assert isinstance(gpu_vectors, numpy.ndarray) and gpu_vectors.shape == cpu_vectors.shape
        numpy.testing.assert_allclose(gpu_vectors, cpu_vectors, rtol=0, atol=1e-5)


def test_the_bilm_trains_on_the_gpu_and_exports(tmp_path):
    serialization_dir = tmp_path / "gpu_bilm"
    model = train_model_from_file(
        str(BILM_CONFIGS / "tiny.jsonnet"),
        str(serialization_dir),
        overrides=bilm_data_overrides(**{"model.dropout": 0.0, "trainer.cuda_device": 0}),
    )
    assert next(model.parameters()).device.type == "cuda"
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    assert numpy.isfinite(metrics["validation_perplexity"])
    assert metrics["validation_perplexity"] < 8  # the same bound as the CPU run: 32 words
    paths = export_bilm_model(model, str(tmp_path / "exported"))
    trained = model.bilm.weight_arrays()  # copied from the GPU
    in_file = layout.read_weight_file(paths["weights"], ElmoOptions.from_file(paths["options"]))
    assert trained.keys() >= in_file.keys()
    assert all(numpy.array_equal(trained[name], array) for name, array in in_file.items())
