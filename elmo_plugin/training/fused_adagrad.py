"""
AllenNLP's "adagrad" optimizer with torch's fused kernel, the biLM configs' default.
"""
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from allennlp.training.optimizers import Optimizer, make_parameter_groups


@functools.lru_cache(maxsize=None)
def fused_runs_on(device: torch.device) -> bool:
    """
    Whether this torch's fused Adagrad runs on `device`'s type: it depends on the version (on a
    GPU, torch 2.11 refuses it at the first step; torch 2.13's Adagrad no longer excludes GPUs),
    so it is asked once per device, with one step on a one-element parameter.
    """
    parameter = torch.zeros(1, device=device, requires_grad=True)
    parameter.grad = torch.ones_like(parameter)
    try:
        torch.optim.Adagrad([parameter], fused=True).step()
    except RuntimeError:
        return False
    return True


@Optimizer.register("fused_adagrad")
class FusedAdagradOptimizer(Optimizer, torch.optim.Adagrad):
    """
    AllenNLP's `"adagrad"` (the same parameters, the same state in checkpoints) with torch's
    fused implementation where this torch runs it on every parameter's device (`fused_runs_on`:
    the CPU, and a GPU where this torch version has the kernel): one pass over each
    parameter per step, where the default makes four (the squared gradient added, its square
    root, the epsilon added, the update). A biLM has tens of millions of parameters, and on the
    CPU those passes took a tenth of a training step (BENCHMARKS.md). The fused kernel rounds
    a little differently from the default, so a run differs from `"adagrad"` in its last bits.
    Checkpoints hold the same state as `"adagrad"`'s, and torch's `fused` setting with it: a run
    continued from a checkpoint keeps the implementation it was written with.
    A parameter group that gets a sparse gradient (`sparse_softmax`) is updated by the default
    implementation from then on (the fused kernel takes dense gradients only).

    Registered as an `Optimizer` with name "fused_adagrad".

    # Parameters

    model_parameters : `List[Tuple[str, torch.nn.Parameter]]`
        Given by the trainer.
    parameter_groups : `List[Tuple[List[str], Dict[str, Any]]]`, optional
        AllenNLP's parameter groups (regular expressions and their options).
    lr : `float`, optional (default = `0.01`)
    lr_decay : `float`, optional (default = `0.0`)
    weight_decay : `float`, optional (default = `0.0`)
    initial_accumulator_value : `float`, optional (default = `0.0`)
        bilm-tf starts the accumulators at 1.0 (`bilm.libsonnet` does).
    eps : `float`, optional (default = `1e-10`)
    """

    def __init__(
        self,
        model_parameters: List[Tuple[str, torch.nn.Parameter]],
        parameter_groups: List[Tuple[List[str], Dict[str, Any]]] = None,
        lr: float = 0.01,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
    ) -> None:
        fused = all(fused_runs_on(device) for device in {parameter.device for _, parameter in model_parameters})
        super().__init__(
            params=make_parameter_groups(model_parameters, parameter_groups),
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            fused=fused or None,
        )

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        for group in self.param_groups:
            if group["fused"] and any(
                parameter.grad is not None and parameter.grad.is_sparse for parameter in group["params"]
            ):
                group["fused"] = None
        return super().step(closure)
