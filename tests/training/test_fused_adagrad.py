import copy

import torch
from allennlp.common import Params
from allennlp.common.testing import AllenNlpTestCase
from allennlp.training.optimizers import Optimizer

from elmo_plugin.training import fused_adagrad
from elmo_plugin.training.fused_adagrad import FusedAdagradOptimizer

SETTINGS = {"lr": 0.2, "initial_accumulator_value": 1.0}


def _model(sparse: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.ModuleDict(
        {"embedding": torch.nn.Embedding(50, 8, sparse=sparse), "linear": torch.nn.Linear(8, 5)}
    )


def _optimizer(model: torch.nn.Module, name: str) -> Optimizer:
    return Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=Params({"type": name, **SETTINGS})
    )


def _train(model: torch.nn.Module, optimizer: Optimizer, steps: int = 5) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        optimizer.zero_grad()
        ids = torch.randint(0, 50, (16,), generator=generator)
        targets = torch.randint(0, 5, (16,), generator=generator)
        logits = model["linear"](model["embedding"](ids))
        torch.nn.functional.cross_entropy(logits, targets).backward()
        optimizer.step()


class TestFusedAdagrad(AllenNlpTestCase):
    def test_the_configs_name_builds_torchs_fused_adagrad_on_the_cpu(self):
        optimizer = _optimizer(_model(), "fused_adagrad")
        assert isinstance(optimizer, FusedAdagradOptimizer)
        assert all(group["fused"] for group in optimizer.param_groups)

    def test_where_this_torch_has_no_fused_kernel_for_the_device_the_default_one_runs(self):
        assert fused_adagrad.fused_runs_on(torch.device("cpu"))
        refusing = torch.device("meta")  # a device type no fused Adagrad runs on
        assert not fused_adagrad.fused_runs_on(refusing)
        model = _model().to(refusing)
        optimizer = _optimizer(model, "fused_adagrad")
        assert not any(group["fused"] for group in optimizer.param_groups)

    def test_it_trains_as_allennlps_adagrad_does_and_their_checkpoints_are_interchangeable(self):
        fused_model, default_model = _model(), _model()
        fused, default = _optimizer(fused_model, "fused_adagrad"), _optimizer(default_model, "adagrad")
        _train(fused_model, fused)
        _train(default_model, default)
        for (name, ours), (_, theirs) in zip(fused_model.named_parameters(), default_model.named_parameters()):
            assert not torch.equal(ours, _model().get_parameter(name)), name  # it did train
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
        # Either loads the other's checkpoint (a copy, as from a file) and continues the run.
        resumed_model = copy.deepcopy(fused_model)
        resumed = _optimizer(resumed_model, "adagrad")
        resumed.load_state_dict(copy.deepcopy(fused.state_dict()))
        _train(resumed_model, resumed)
        _train(fused_model, fused)
        for ours, theirs in zip(fused_model.parameters(), resumed_model.parameters()):
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)

    def test_a_sparse_gradient_is_updated_by_the_default_implementation(self):
        fused_model, default_model = _model(sparse=True), _model(sparse=True)
        fused = _optimizer(fused_model, "fused_adagrad")
        _train(fused_model, fused)
        _train(default_model, _optimizer(default_model, "adagrad"))
        assert not any(group["fused"] for group in fused.param_groups)
        for ours, theirs in zip(fused_model.parameters(), default_model.parameters()):
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
