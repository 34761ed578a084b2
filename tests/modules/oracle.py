"""
Builds our modules and AllenNLP's (the oracle) on identical random weights, and compares them.

Float32 bound: both implementations compute the same formulas with float32 rounding in a
different order (we hoist the input projections into one matrix product per layer), so neither
is "right"; the float64 run of AllenNLP is the reference, and ours must be no further from it
than twice AllenNLP's own float32 error, plus 1e-6 (a few ulps at the activations' magnitude,
which is below 5) so that an error that is 0 by luck does not make the bound 0.
"""
from typing import Dict, List, Sequence

import torch

from elmo_plugin.weights.random_weights import write_random_elmo

FLOAT64_TOLERANCE = 1e-9


def write_architecture(directory, options, seed: int = 0):
    return write_random_elmo(directory, options, seed=seed)


def max_difference(ours: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor]) -> float:
    assert len(ours) == len(theirs)
    worst = 0.0
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape, (a.shape, b.shape)
        worst = max(worst, (a.double() - b.double()).abs().max().item() if a.numel() else 0.0)
    return worst


def assert_float32_within_noise(
    ours32: List[torch.Tensor], theirs32: List[torch.Tensor], reference64: List[torch.Tensor]
) -> None:
    our_error = max_difference(ours32, reference64)
    their_error = max_difference(theirs32, reference64)
    assert our_error <= 2 * their_error + 1e-6, (our_error, their_error)


def flatten(outputs: Dict[str, List[torch.Tensor]], key: str) -> List[torch.Tensor]:
    return [tensor.detach() for tensor in outputs[key]]
