import numpy
import pytest
import torch
from allennlp.common.testing import AllenNlpTestCase
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss

from elmo_plugin.kernels import onednn
from elmo_plugin.kernels.recorded_products import bfloat16_products
from elmo_plugin.models import sampled_softmax
from elmo_plugin.models.candidate_sampler import log_uniform_without_replacement
from elmo_plugin.models.sampled_softmax import FusedSampledSoftmaxLoss
from tests.helpers import NewTensors, needs_bfloat16
from tests.kernels.test_onednn import onednn_calls  # noqa: F401 (a fixture)


def losses_and_gradients(loss: SampledSoftmaxLoss, embeddings: torch.Tensor, targets: torch.Tensor, seed: int):
    numpy.random.seed(seed)  # the samples' generator
    inputs = embeddings.clone().requires_grad_(True)
    value = loss(inputs, targets)
    value.backward()
    if loss.sparse:
        weight, bias = loss.softmax_w.weight.grad, loss.softmax_b.weight.grad
        assert weight.is_sparse and bias.is_sparse
        weight, bias = weight.to_dense(), bias.to_dense()
    else:
        weight, bias = loss.softmax_w.grad, loss.softmax_b.grad
    return value.detach(), inputs.grad, weight, bias


def allennlps_and_ours(num_words: int, num_samples: int, sparse: bool, dtype=torch.float32):
    torch.manual_seed(0)
    theirs = SampledSoftmaxLoss(num_words, 16, num_samples, sparse=sparse)
    theirs.choice_func = log_uniform_without_replacement  # the same samples as AllenNLP's (tested)
    ours = FusedSampledSoftmaxLoss(num_words, 16, num_samples, sparse=sparse)
    ours.load_state_dict(theirs.state_dict())
    with torch.no_grad():  # a bias that is not zero
        for loss in (theirs, ours):
            bias = loss.softmax_b.weight if sparse else loss.softmax_b
            bias.copy_(torch.linspace(-1.0, 1.0, bias.numel()).view_as(bias))
    return theirs.to(dtype), ours.to(dtype)


class TestFusedSampledSoftmaxLoss(AllenNlpTestCase):
    @pytest.mark.parametrize("num_words, num_samples, sparse", [
        (60, 40, False),  # most targets are among the samples: their sampled logits are masked
        (2000, 300, False),
        (60, 40, True),
    ])
    def test_the_same_loss_and_gradients_as_allennlps(self, num_words, num_samples, sparse):
        theirs, ours = allennlps_and_ours(num_words, num_samples, sparse)
        generator = torch.Generator().manual_seed(1)
        embeddings = torch.randn(70, 16, generator=generator)
        targets = torch.randint(0, num_words, (70,), generator=generator)
        targets[:3] = targets[3]  # a target several times
        for seed in range(3):
            expected = losses_and_gradients(theirs, embeddings, targets, seed)
            got = losses_and_gradients(ours, embeddings, targets, seed)
            for name, mine, reference in zip(("loss", "embeddings", "weight", "bias"), got, expected):
                torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-5, msg=name)
            for loss in (theirs, ours):
                loss.zero_grad()

    def test_sampled_targets_are_found_by_position(self):
        sampled_ids = torch.tensor([7, 3, 11, 0])
        rows, columns = sampled_softmax._sampled_targets(torch.tensor([3, 5, 0, 12, 3]), sampled_ids)
        assert rows.tolist() == [0, 2, 4] and columns.tolist() == [1, 3, 1]

    def test_its_gradients_are_exact_in_float64(self):
        _, ours = allennlps_and_ours(30, 12, False, dtype=torch.float64)
        generator = torch.Generator().manual_seed(2)
        embeddings = torch.randn(9, 16, generator=generator, dtype=torch.float64, requires_grad=True)
        targets = torch.randint(0, 30, (9,), generator=generator)
        numpy.random.seed(0)
        sampled_ids, target_count, sampled_count = ours.log_uniform_candidate_sampler(targets, ours.choice_func)
        assert sampled_softmax._sampled_targets(targets, sampled_ids)[0].numel() > 0  # masking is exercised

        def loss(embeddings, weight, bias):
            return sampled_softmax._SampledSoftmaxNll.apply(
                embeddings, weight, bias, targets, sampled_ids, target_count.double().log(),
                sampled_count.double().log(), False,
            )

        assert torch.autograd.gradcheck(loss, (embeddings, ours.softmax_w, ours.softmax_b))

    @pytest.mark.skipif(not onednn.available(), reason="needs oneDNN in torch")
    def test_the_logits_and_their_gradients_are_the_chosen_products(self, onednn_calls):  # noqa: F811
        _, ours = allennlps_and_ours(2000, 300, False)
        numpy.random.seed(0)
        ours(torch.randn(70, 16, requires_grad=True), torch.randint(0, 2000, (70,))).backward()
        # the logits, then the embeddings' gradient and the samples' weight gradient (transposed,
        # a tall narrow result); rows and inner sizes padded
        assert onednn_calls == [((80, 16), (300, 16)), ((80, 320), (16, 320)), ((16, 80), (300, 80))]

    @pytest.mark.parametrize("precision, saved_dtype", [
        ("float32", torch.float32),
        pytest.param("bfloat16", torch.bfloat16, marks=needs_bfloat16),
    ])
    def test_the_logits_gradient_is_made_once_in_the_products_precision(self, precision, saved_dtype):
        # The forward pass makes one float32 tensor of the logits' size (the softmax overwrites
        # the logits) and keeps d loss / d logits as the backward's products read it (bfloat16:
        # rounded once, half the memory); the backward pass makes no tensor of that size.
        _, ours = allennlps_and_ours(2000, 300, False)
        numpy.random.seed(0)
        with NewTensors() as made_forward, bfloat16_products(precision == "bfloat16"):
            loss = ours(torch.randn(70, 16, requires_grad=True), torch.randint(0, 2000, (70,)))
        # (oneDNN's products make rows padded to a multiple of 16: (80, 300))
        logits_sized = [dtype for shape, dtype in made_forward.made if shape in ((70, 300), (80, 300))]
        assert logits_sized.count(torch.float32) == 1
        saved = [t.dtype for t in loss.grad_fn.saved_tensors if t.shape == (70, 300)]
        assert saved == [saved_dtype]
        with NewTensors() as made_backward:
            loss.backward()
        shapes = [shape for shape, _ in made_backward.made]
        assert shapes and (70, 300) not in shapes and (300, 70) not in shapes
