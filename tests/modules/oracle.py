"""
Builds our modules and AllenNLP's (the oracle) on identical random weights, and compares them.

Float32 bound: both implementations compute the same formulas with float32 rounding in a
different order (we hoist the input projections into one matrix product per layer), so neither
is "right"; the float64 run of AllenNLP is the reference, and ours must be no further from it
than twice AllenNLP's own float32 error, plus 1e-6 (a few ulps at the activations' magnitude,
which is below 5) so that an error that is 0 by luck does not make the bound 0.
"""
import json
from typing import Dict, List, Sequence

import h5py
import numpy
import torch
from allennlp.modules.elmo import Elmo as AllenNlpElmo
from allennlp.modules.elmo import _ElmoBiLm as AllenNlpElmoBiLm
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin import Elmo, ElmoBiLm, batch_to_ids
from tests.random_weights import write_random_elmo
from tests.helpers import CARRIED_STATE_BATCHES, ELMO_FIXTURES, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

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


# The checks below run on the CPU (tests/modules) and on a GPU (tests/test_cuda.py).


def check_top_layer_matches_tensorflow(device: torch.device) -> None:
    """The fixture biLM reproduces the original TensorFlow code's top layer (AllenNLP's test)."""
    with open(ELMO_FIXTURES / "sentences.json") as sentences_handle:
        sentences = json.load(sentences_handle)
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).to(device)
    for i in range(10):
        batch = [sentences[k][i].split() for k in range(3)]
        output = bilm(batch_to_ids(batch).to(device))
        top_layer, mask = remove_sentence_boundaries(output["activations"][2], output["mask"])
        assert top_layer.device.type == device.type
        lengths = mask.sum(dim=1).tolist()
        assert lengths == [len(sentence) for sentence in batch]
        for k in range(3):
            with h5py.File(ELMO_FIXTURES / f"lm_embeddings_{k}.hdf5", "r") as handle:
                # (2, n, 16) forward and backward halves -> (n, 32)
                expected = numpy.concatenate(handle[str(i)][...], axis=-1)
            # AllenNLP's own criterion for this fixture (numpy's default rtol of 1e-5).
            actual = top_layer[k, : lengths[k]].detach().cpu().numpy()
            assert numpy.allclose(actual, expected, atol=1e-6)


def check_bilm_equals_allennlp(options_file: str, weight_file: str, device: torch.device) -> None:
    """Ours and AllenNLP's biLM over `CARRIED_STATE_BATCHES`, in float64 and float32."""
    batches = [batch_to_ids(batch).to(device) for batch in CARRIED_STATE_BATCHES]
    outputs = {}
    for name, bilm_class in (("ours", ElmoBiLm), ("theirs", AllenNlpElmoBiLm)):
        for dtype in (torch.float64, torch.float32):
            bilm = bilm_class(options_file, weight_file).to(device, dtype)
            results = [bilm(ids) for ids in batches]
            outputs[name, dtype] = [
                [activation.detach() for activation in result["activations"]] for result in results
            ]
            outputs[name, "mask"] = [result["mask"] for result in results]
    for batch_index in range(len(batches)):
        assert torch.equal(outputs["ours", "mask"][batch_index], outputs["theirs", "mask"][batch_index])
        reference = outputs["theirs", torch.float64][batch_index]
        assert max_difference(outputs["ours", torch.float64][batch_index], reference) <= FLOAT64_TOLERANCE
        assert_float32_within_noise(
            outputs["ours", torch.float32][batch_index],
            outputs["theirs", torch.float32][batch_index],
            reference,
        )


def check_elmo_gradients_equal_allennlp(options_file: str, weight_file: str, device: torch.device) -> None:
    """Float64 gradients of every parameter of ours and AllenNLP's trainable `Elmo`."""
    batches = [batch_to_ids(batch).to(device) for batch in CARRIED_STATE_BATCHES]
    gradients = {}
    for name, elmo_class in (("ours", Elmo), ("theirs", AllenNlpElmo)):
        elmo = elmo_class(options_file, weight_file, 1, requires_grad=True, dropout=0.0)
        elmo = elmo.to(device, torch.float64)
        parameters = dict(elmo.named_parameters())
        assert all(p.requires_grad for p in parameters.values())
        generator = torch.Generator().manual_seed(1)
        for ids in batches:
            representation = elmo(ids)["elmo_representations"][0]
            weights = torch.randn(representation.shape, dtype=torch.float64, generator=generator)
            (representation * weights.to(device)).sum().backward()
        gradients[name] = {key: p.grad for key, p in parameters.items()}
    assert set(gradients["ours"]) == set(gradients["theirs"])
    for key, gradient in gradients["theirs"].items():
        assert gradient is not None and gradients["ours"][key] is not None, key
        torch.testing.assert_close(gradients["ours"][key], gradient, rtol=1e-9, atol=1e-9, msg=key)
