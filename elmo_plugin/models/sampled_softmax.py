"""
AllenNLP's `SampledSoftmaxLoss` with its training loss computed in fewer passes over the
`(targets, samples)` logits (`FusedSampledSoftmaxLoss`).
"""
from typing import NamedTuple, Tuple

import torch
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss
from allennlp.nn import util
from overrides import overrides
from torch.autograd.function import once_differentiable

from elmo_plugin.kernels.recorded_products import (
    FORWARD,
    INPUT_GRADIENT,
    WEIGHT_GRADIENT,
    current_precision,
    operand_dtype,
    product_nt,
)
from elmo_plugin.kernels.roles import Role
from elmo_plugin.models.candidate_sampler import log_uniform_without_replacement

# AllenNLP's logit for a sampled word that is the row's own target.
_MASKED_LOGIT = -10000.0


class FusedSampledSoftmaxLoss(SampledSoftmaxLoss):
    """
    AllenNLP's `SampledSoftmaxLoss` (same parameters, samples, evaluation and loss, to float32
    rounding), whose training loss makes fewer passes over the `(targets, samples)` logits,
    with its backward pass written out (`_SampledSoftmaxNll`). AllenNLP builds the logits in
    five steps (the product, the bias, the expected counts, the mask of sampled targets as a
    full bool tensor, the concatenation with the true logits), then takes a log-softmax whose
    gradient flows back through each; at 640 targets and 8,192 samples those passes took longer
    than the products (BENCHMARKS.md). Here the bias and the counts are added by the product,
    the few sampled targets are masked by position, and one softmax gives both the loss and
    its gradient. Its products are `recorded_products`' (the kernel chosen for this
    CPU; bfloat16 where training asks for it).

    The negatives are AllenNLP's, drawn by `log_uniform_without_replacement` (the same ids).

    # Parameters

    num_words : `int`
        The vocabulary size.
    embedding_dim : `int`
        The size of the vectors the softmax reads.
    num_samples : `int`
        Negative samples per call in training (fewer than `num_words`).
    sparse : `bool`, optional (default = `False`)
        Sparse gradients for the softmax weights and bias (AllenNLP's option).
    """

    def __init__(self, num_words: int, embedding_dim: int, num_samples: int, sparse: bool = False) -> None:
        super().__init__(num_words=num_words, embedding_dim=embedding_dim, num_samples=num_samples, sparse=sparse)
        self.choice_func = log_uniform_without_replacement

    @overrides
    def _forward_train(
        self, embeddings: torch.Tensor, targets: torch.Tensor, target_token_embedding: torch.Tensor
    ) -> torch.Tensor:
        sampled_ids, target_expected_count, sampled_expected_count = self.log_uniform_candidate_sampler(
            targets, choice_func=self.choice_func
        )
        tiny = util.tiny_value_of_dtype(target_expected_count.dtype)
        if self.sparse:
            weight, bias = self.softmax_w.weight, self.softmax_b.weight
        else:
            weight, bias = self.softmax_w, self.softmax_b
        return _SampledSoftmaxNll.apply(
            embeddings,
            weight,
            bias,
            targets.long(),
            sampled_ids,
            torch.log(target_expected_count + tiny),
            torch.log(sampled_expected_count + tiny),
            self.sparse,
        )


def _sampled_targets(targets: torch.Tensor, sampled_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The rows whose target is among the (distinct) samples, and its position there."""
    sorted_ids, order = sampled_ids.sort()
    at = torch.searchsorted(sorted_ids, targets).clamp_(max=sorted_ids.numel() - 1)
    rows = (sorted_ids[at] == targets).nonzero().squeeze(1)
    return rows, order[at[rows]]


class _Saved(NamedTuple):
    """What the forward pass of `_SampledSoftmaxNll` keeps for the backward pass."""

    embeddings: torch.Tensor  # (N, D)
    sampled_ids: torch.Tensor  # (S,)
    targets: torch.Tensor  # (N,)
    sampled_weight: torch.Tensor  # (S, D)
    true_weight: torch.Tensor  # (N, D)
    logits_gradient: torch.Tensor  # (N, S): d loss / d Z for an incoming gradient of 1
    logsumexp: torch.Tensor  # (N,): logsumexp(z, Z)
    true_logits: torch.Tensor  # (N,): z


def _rescaled_rows(probabilities: torch.Tensor, row_scale: torch.Tensor, precision: str) -> torch.Tensor:
    """`probabilities * row_scale[:, None]` in the dtype the products of `precision` read, in
    one pass: in place where that is the probabilities' own, else rounded once on the way."""
    dtype = operand_dtype(probabilities, precision)
    if dtype is probabilities.dtype:
        return probabilities.mul_(row_scale.unsqueeze(1))
    return torch.mul(probabilities, row_scale.unsqueeze(1), out=torch.empty_like(probabilities, dtype=dtype))


class _SampledSoftmaxNll(torch.autograd.Function):
    """
    The negative log-likelihood of each target against itself and the samples, summed: with
    `z_n` the true logit and `Z_n` the sampled ones (each minus the log of its expected count),
    `sum_n logsumexp(z_n, Z_n) - z_n`. The forward pass, which has the softmax of `Z`, also
    makes the gradient of the loss by `Z` (in the precision the backward's products read); the
    backward pass reads it.

    `apply(embeddings, weight, bias, targets, sampled_ids, target_log_count, sampled_log_count,
    sparse)`: `(N, D)` vectors, the `(V, D)` softmax weight and its `(V,)` bias (`(V, 1)` as a
    sparse embedding's), `(N,)` targets, `(S,)` distinct samples and the logs of their expected
    counts; `sparse`: the weight and bias gradients as sparse tensors.
    """

    @staticmethod
    def forward(
        ctx,
        embeddings: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        sampled_ids: torch.Tensor,
        target_log_count: torch.Tensor,
        sampled_log_count: torch.Tensor,
        sparse: bool,
    ) -> torch.Tensor:
        bias_vector = bias.reshape(-1)
        # (S, D), (N, D)
        sampled_weight = weight.index_select(0, sampled_ids)
        true_weight = weight.index_select(0, targets)
        # (N,)
        true_logits = (true_weight * embeddings).sum(dim=1) + bias_vector.index_select(0, targets) - target_log_count
        # (N, S), the bias and the counts added by the product
        sampled_bias = bias_vector.index_select(0, sampled_ids) - sampled_log_count
        logits = product_nt(Role.SAMPLED_SOFTMAX, FORWARD, embeddings, sampled_weight, sampled_bias)
        masked_rows, masked_columns = _sampled_targets(targets, sampled_ids)
        logits[masked_rows, masked_columns] = _MASKED_LOGIT
        # softmax(Z) = exp(Z - logsumexp(Z)), so its largest entry is 1 / sum(exp(Z - max Z)):
        # logsumexp(Z) without a pass of its own (torch.logsumexp makes several).
        maxima = logits.amax(dim=1)
        # (N, S), on the CPU in place: the logits are not read again, and the two would be the
        # forward pass's largest tensors together. torch's CPU softmax reads each row before
        # writing it (the tests compare with AllenNLP's); other devices get a new tensor.
        probabilities = torch.softmax(logits, dim=1, out=logits if logits.device.type == "cpu" else None)
        samples_logsumexp = maxima - probabilities.amax(dim=1).log()
        # (N,)
        logsumexp = torch.logaddexp(true_logits, samples_logsumexp)
        # (N, S): d loss / d Z = exp(Z - logsumexp) = softmax(Z) rescaled per row, for an incoming
        # gradient of 1 (the loss is a sum: the backward pass scales the products' small results
        # by the actual one). Made here, where the softmax is still float32, in the precision
        # the backward's products read: those products and the bias's sum read it as it is,
        # with no float32 copy of its own made and rounded again in the backward pass.
        logits_gradient = _rescaled_rows(probabilities, (samples_logsumexp - logsumexp).exp_(), current_precision())
        del logits, probabilities  # in bfloat16, the float32 tensor; in float32, `logits_gradient` itself
        logits_gradient[masked_rows, masked_columns] = 0.0  # a masked logit is a constant
        ctx.save_for_backward(
            *_Saved(
                embeddings,
                sampled_ids,
                targets,
                sampled_weight,
                true_weight,
                logits_gradient,
                logsumexp,
                true_logits,
            )
        )
        ctx.weight_shape, ctx.bias_shape, ctx.sparse = weight.shape, bias.shape, sparse
        ctx.precision = current_precision()
        return (logsumexp - true_logits).sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, gradient: torch.Tensor):
        saved = _Saved(*ctx.saved_tensors)
        precision = ctx.precision
        logits_gradient = saved.logits_gradient  # for an incoming gradient of 1; scaled below
        # (N,): d loss / d z = exp(z - logsumexp) - 1
        true_gradient = (saved.true_logits - saved.logsumexp).exp_().sub_(1.0).mul_(gradient)
        # (N, D)
        embeddings_gradient = product_nt(
            Role.SAMPLED_SOFTMAX, INPUT_GRADIENT, logits_gradient, saved.sampled_weight.t(), precision=precision
        ).mul_(gradient)
        embeddings_gradient.add_(saved.true_weight * true_gradient.unsqueeze(1))
        # (S, D), (N, D): the rows of the weight's gradient, by sample and by target
        sampled_weight_gradient = product_nt(
            Role.SAMPLED_SOFTMAX, WEIGHT_GRADIENT, logits_gradient.t(), saved.embeddings.t(), precision=precision
        ).mul_(gradient)
        true_weight_gradient = saved.embeddings * true_gradient.unsqueeze(1)
        # (S,), (N,): float32 sums, also of a bfloat16 gradient
        sampled_bias_gradient = logits_gradient.sum(dim=0, dtype=torch.float32).mul_(gradient)
        rows = torch.cat([saved.sampled_ids, saved.targets])
        weight_rows = torch.cat([sampled_weight_gradient, true_weight_gradient])
        bias_rows = torch.cat([sampled_bias_gradient, true_gradient])
        if ctx.sparse:
            # As the sparse embeddings' own backward gives them: one entry per row looked up.
            # The rows are ids of this vocabulary (samples and targets), so torch's check of
            # the indices, off by default with a warning at the first call, is not needed.
            weight_gradient = torch.sparse_coo_tensor(
                rows.unsqueeze(0), weight_rows, ctx.weight_shape, check_invariants=False
            )
            bias_gradient = torch.sparse_coo_tensor(
                rows.unsqueeze(0), bias_rows.view(-1, *ctx.bias_shape[1:]), ctx.bias_shape, check_invariants=False
            )
        else:
            weight_gradient = weight_rows.new_zeros(ctx.weight_shape).index_add_(0, rows, weight_rows)
            bias_gradient = bias_rows.new_zeros(ctx.bias_shape.numel()).index_add_(0, rows, bias_rows).view(
                ctx.bias_shape
            )
        return embeddings_gradient, weight_gradient, bias_gradient, None, None, None, None, None
