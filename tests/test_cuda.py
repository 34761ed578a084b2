"""
ELMo on a GPU: the same oracle checks as on the CPU, run on CUDA tensors.

Skipped where torch sees no GPU, which includes CI (it has none). Run them on a machine with
one: `python -m pytest tests/test_cuda.py` (BENCHMARKS.md says when they last ran, and where).
Float32 here means float32: TF32, which cuDNN's convolutions use by default, is turned off,
since its 10-bit mantissa is far outside the 1e-6 that the TensorFlow fixture demands.
"""
import json
import os
import subprocess
import sys

import numpy
import pytest
import torch
from allennlp.commands.train import train_model, train_model_from_file
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import Optimizer

from elmo_plugin import ElmoBiLm, ElmoEmbedder, batch_to_ids
from elmo_plugin.models.export import export_bilm_model
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.training.fused_adagrad import fused_runs_on
from elmo_plugin.weights.formats import read_bilm_weights
from tests.helpers import (
    BILM_CONFIGS,
    copy_of_the_fixture_biLM,
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    ORACLE_ARCHITECTURES,
    REPO_ROOT,
    bilm_data_overrides,
    read_hdf5,
)
from tests.inference.test_workers import LINES, OPTIONS, assert_identical
from tests.weights.test_recorded import tagger_logits, tagger_params
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


def _graphed_and_stepped(tmp_path, dtype):
    options_file, weight_file = write_architecture(tmp_path, ORACLE_ARCHITECTURES["fixture"](), seed=5)
    graphed = ElmoBiLm(options_file, weight_file).to(CUDA, dtype)
    stepped = ElmoBiLm(options_file, weight_file).to(CUDA, dtype)
    stepped.lstm.cuda_graphs = False
    return graphed, stepped


# Batches whose padded shapes repeat (so graphs are replayed, with carried state) and change
# (rows 1 -> 3 -> 5 -> 20; lengths of one chunk, of several, of chunks of every length).
_GRAPH_BATCHES = [
    [["one"]],
    [["The", "cat", "sat", "."], ["A", "dog"], ["x"] * 40],
    [["a", "b"], [], ["c"] * 17],
    [["w"] * (3 * index % 23 + 1) for index in range(5)],
    [["w"] * (index % 37 + 1) for index in range(20)],
    [["The", "cat", "sat", "."], ["A", "dog"], ["x"] * 40],
]


def test_cuda_graphs_compute_what_the_step_loop_does_in_float64(tmp_path):
    graphed, stepped = _graphed_and_stepped(tmp_path, torch.float64)
    with torch.no_grad():
        for batch in _GRAPH_BATCHES:
            ids = batch_to_ids(batch).to(CUDA)
            expected, actual = stepped(ids), graphed(ids)
            assert torch.equal(expected["mask"], actual["mask"])
            for want, got in zip(expected["activations"], actual["activations"]):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # One graph per direction, padded row count and chunk length used, replayed after that.
    assert 0 < len(graphed.lstm.fixed_shapes.graphs) <= 2 * 4 * 5


def test_cuda_graphs_follow_new_weights_precision_and_modes(tmp_path):
    graphed, stepped = _graphed_and_stepped(tmp_path, torch.float32)
    ids = batch_to_ids(_GRAPH_BATCHES[1]).to(CUDA)

    def assert_same(atol: float = 2e-5) -> None:
        graphed.reset_states()
        stepped.reset_states()
        with torch.no_grad():
            expected, actual = stepped(ids)["activations"], graphed(ids)["activations"]
        for want, got in zip(expected, actual):
            torch.testing.assert_close(got, want, rtol=0, atol=atol)

    with torch.inference_mode():  # buffers made here serve the calls outside it
        graphed(ids)
    assert_same()
    with torch.no_grad():  # weights changed in place: the graphs must read the new values
        for model in (graphed, stepped):
            model.lstm.forward_layer_1.state_linearity.weight.mul_(0.5)
    assert_same()
    for model in (graphed, stepped):
        model.set_precision("bfloat16")
    # bfloat16 rounds each product's input: a last-bit difference between two GEMM algorithms
    # can move a value by one bfloat16 step.
    assert_same(atol=3e-2)
    graphed.lstm.cuda_graphs = False  # the flag, any time
    assert_same(atol=0)
    graphed.lstm.cuda_graphs = True
    graphed.set_precision("float32")
    stepped.set_precision("float32")
    assert_same()
    # Where gradients are recorded, the step loop runs (and its backward pass).
    trainable = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, requires_grad=True).to(CUDA)
    before = len(trainable.lstm.fixed_shapes.graphs)
    trainable(ids)["activations"][-1].sum().backward()
    assert len(trainable.lstm.fixed_shapes.graphs) == before == 0


def test_the_configs_optimizer_steps_on_the_gpu():
    # torch's fused Adagrad runs on a GPU from some version on; where it does not, the default.
    model = torch.nn.Linear(4, 3).to(CUDA)
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=Params({"type": "fused_adagrad", "lr": 0.2})
    )
    assert all(bool(group["fused"]) == fused_runs_on(CUDA) for group in optimizer.param_groups)
    before = model.weight.detach().clone()
    model(torch.ones(2, 4, device=CUDA)).sum().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)


def test_workers_on_the_gpu_write_what_one_gpu_process_writes(tmp_path):
    input_path = tmp_path / "input.txt"
    input_path.write_text("\n".join(LINES) + "\n")
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, cuda_device=0)
    embedder.embed_file(str(input_path), str(tmp_path / "one.hdf5"), **OPTIONS)
    expected = read_hdf5(tmp_path / "one.hdf5")
    embedder.embed_file(str(input_path), str(tmp_path / "two.hdf5"), num_workers=2, **OPTIONS)
    assert_identical(tmp_path / "two.hdf5", expected)
    assert embedder.device == torch.device("cuda", 0)  # back on its GPU after the workers
    # The same through torchrun, each process on its LOCAL_RANK-th GPU after --cuda-device.
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "elmo_plugin", "elmo",
         str(input_path), str(tmp_path / "launched.hdf5"), "--all", "--deterministic", "--cuda-device", "0",
         "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE,
         "--chunk-size", str(OPTIONS["chunk_size"]), "--batch-size", str(OPTIONS["batch_size"])],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path)),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert_identical(tmp_path / "launched.hdf5", expected)


def test_a_tagger_trained_on_the_gpu_loads_there_without_its_elmo_files(tmp_path, monkeypatch):
    # Fine-tuned with cached word vectors: the record's <S>/</S> vectors, read to the CPU, must
    # reach the GPU with the rest of the model.
    training_dir = tmp_path / "project"
    copy_of_the_fixture_biLM(training_dir / "elmo")
    monkeypatch.chdir(training_dir)
    params = tagger_params(namespace_to_cache="elmo_words", requires_grad=True)
    params["trainer"]["cuda_device"] = 0
    train_model(params, str(training_dir / "run"))
    archive = training_dir / "run" / "model.tar.gz"
    expected = tagger_logits(archive, cuda_device=0)

    (training_dir / "elmo").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    for got, want in zip(tagger_logits(archive, cuda_device=0), expected):
        numpy.testing.assert_array_equal(got, want)
    for got, want in zip(tagger_logits(archive), expected):
        numpy.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_training_steps_as_cuda_graphs_give_the_step_loops_values_in_float64():
    results = {}
    for graphs in (True, False):
        torch.manual_seed(0)
        lstm = ElmoLstm(16, 8, 32, num_layers=2, requires_grad=True, memory_cell_clip_value=0.5,
                        state_projection_clip_value=0.4)
        lstm.store_biases_as_in_file()  # as a biLM in training has them
        lstm.to(CUDA, torch.float64)
        lstm.cuda_graphs = graphs
        optimizer = torch.optim.Adagrad(lstm.parameters(), lr=0.2)
        generator = torch.Generator().manual_seed(1)
        state = lstm.zero_state(6, torch.empty(0, dtype=torch.float64, device=CUDA))
        losses, input_gradients = [], []
        for step in range(6):
            inputs = torch.randn(6, 20, 16, generator=generator, dtype=torch.float64).to(CUDA).requires_grad_()
            mask = torch.ones(6, 20, dtype=torch.bool, device=CUDA)
            if step == 3:
                mask[1, 7:] = False  # a batch with padding runs the step loop in between
            outputs, state = lstm.forward_with_state(inputs, mask, state)
            weights = torch.randn(outputs.shape, generator=generator, dtype=torch.float64).to(CUDA)
            loss = (outputs * weights).sum() + state[0].sum() + state[1].square().sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            state = tuple(tensor.detach() for tensor in state)  # carried, as in biLM training
            losses.append(loss.detach())
            input_gradients.append(inputs.grad)
        results[graphs] = (losses, input_gradients, [parameter.detach() for parameter in lstm.parameters()])
        cells = lstm.forward_layers + lstm.backward_layers
        # Each cell: its forward steps and their backward, each captured once and replayed.
        assert [cell.captured_steps.graphs_captured() for cell in cells] == [2 if graphs else 0] * 4
    for graphed, stepped in zip(results[True], results[False]):
        for got, want in zip(graphed, stepped):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
