"""
ELMo on a GPU: the same oracle checks as on the CPU, run on CUDA tensors.

Skipped where torch sees no GPU, which includes CI (it has none). Run them on a machine with
one: `python -m pytest tests/test_cuda.py` (BENCHMARKS.md says when they last ran, and where).
Float32 here means float32: TF32, which cuDNN's convolutions use by default, is turned off,
since its 10-bit mantissa is far outside the 1e-6 that the TensorFlow fixture demands.
"""
import json

import numpy
import pytest
import torch
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoBiLm, ElmoEmbedder, batch_to_ids
from elmo_plugin.models.export import export_bilm_model
from elmo_plugin.weights.formats import read_bilm_weights
from tests.helpers import (
    BILM_CONFIGS,
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    ORACLE_ARCHITECTURES,
    bilm_data_overrides,
)
from tests.modules.oracle import (
    check_bilm_equals_allennlp,
    check_elmo_gradients_equal_allennlp,
    check_top_layer_matches_tensorflow,
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
    check_top_layer_matches_tensorflow(CUDA)


@pytest.mark.parametrize("architecture", sorted(ORACLE_ARCHITECTURES))
def test_bilm_equals_allennlp_on_the_gpu(architecture, tmp_path):
    options_file, weight_file = write_architecture(
        tmp_path, ORACLE_ARCHITECTURES[architecture](), seed=11
    )
    check_bilm_equals_allennlp(options_file, weight_file, CUDA)


def test_elmo_gradients_equal_allennlp_on_the_gpu(tmp_path):
    options_file, weight_file = write_architecture(
        tmp_path, ORACLE_ARCHITECTURES["fixture"](), seed=7
    )
    check_elmo_gradients_equal_allennlp(options_file, weight_file, CUDA)


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
    in_file = read_bilm_weights(paths["options"], paths["weights"]).arrays
    assert trained.keys() >= in_file.keys()
    assert all(numpy.array_equal(trained[name], array) for name, array in in_file.items())
