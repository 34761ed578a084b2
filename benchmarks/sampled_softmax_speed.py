"""
The biLM's sampled softmax in training: AllenNLP's `SampledSoftmaxLoss` against ours
(`FusedSampledSoftmaxLoss`), forward and backward of one direction of a training step, in one
process, alternating, with the same samples (AllenNLP's sampler is given ours, which draws the
same ids faster: its own would time Python's draw loop). Prints the medians, the ratio and the
largest differences of the loss and the gradients. `--precision bfloat16`: ours with
bfloat16 products (`training_precision` bfloat16), AllenNLP's in float32 as ever (the
differences are then bfloat16's).

    python benchmarks/sampled_softmax_speed.py --targets 640 --samples 8192 --words 22219
    python benchmarks/sampled_softmax_speed.py --targets 2560 --precision bfloat16
"""
import argparse
import statistics
import time
from typing import Dict, List

import numpy
import torch
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss

from elmo_plugin.kernels import allocation
from elmo_plugin.kernels.recorded_products import BFLOAT16, FLOAT32, TRAINING_PRECISIONS, bfloat16_products
from elmo_plugin.models.candidate_sampler import log_uniform_without_replacement
from elmo_plugin.models.sampled_softmax import FusedSampledSoftmaxLoss


def timed_step(loss: SampledSoftmaxLoss, embeddings: torch.Tensor, targets: torch.Tensor, seed: int,
               in_bfloat16: bool = False):
    numpy.random.seed(seed)
    inputs = embeddings.clone().requires_grad_(True)
    loss.zero_grad()
    start = time.perf_counter()
    with bfloat16_products(in_bfloat16):
        value = loss(inputs, targets)
    middle = time.perf_counter()
    value.backward()
    end = time.perf_counter()
    results = (value.detach(), inputs.grad, loss.softmax_w.grad, loss.softmax_b.grad)
    return middle - start, end - middle, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=int, default=640, help="rows: streams x window of a step")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--words", type=int, default=22219, help="vocabulary (the Brown benchmark's)")
    parser.add_argument("--dim", type=int, default=128, help="the LSTM's projection")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=TRAINING_PRECISIONS, default=FLOAT32, help="ours: its products")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    allocation.keep_freed_memory_for_reuse()  # as training does
    torch.manual_seed(0)
    allennlps = SampledSoftmaxLoss(args.words, args.dim, args.samples)
    allennlps.choice_func = log_uniform_without_replacement
    ours = FusedSampledSoftmaxLoss(args.words, args.dim, args.samples)
    ours.load_state_dict(allennlps.state_dict())
    embeddings = torch.randn(args.targets, args.dim)
    targets = torch.randint(0, args.words, (args.targets,))
    losses: Dict[str, SampledSoftmaxLoss] = {"AllenNLP": allennlps, "ours": ours}
    times: Dict[str, List[float]] = {name: [] for name in losses}
    largest: Dict[str, float] = {}
    for round_ in range(args.rounds + 3):
        results = {}
        for name, loss in losses.items():
            in_bfloat16 = name == "ours" and args.precision == BFLOAT16
            forward, backward, results[name] = timed_step(loss, embeddings, targets, round_, in_bfloat16)
            if round_ >= 3:  # the first rounds allocate
                times[name].append((forward, backward))
        for label, theirs, mine in zip(("loss", "input gradient", "weight gradient", "bias gradient"),
                                       results["AllenNLP"], results["ours"]):
            largest[label] = max(largest.get(label, 0.0), float((theirs - mine).abs().max()))
    print(f"{args.targets} targets, {args.samples} samples, {args.words} words, dim {args.dim}, "
          f"{args.threads} threads, ours in {args.precision}; medians of {args.rounds} alternated rounds")
    def median(name: str, part: int) -> float:  # part 0: forward, 1: backward; in ms
        return statistics.median(step[part] for step in times[name]) * 1e3

    for name in losses:
        print(f"  {name}: forward {median(name, 0):.2f} ms, backward {median(name, 1):.2f} ms, "
              f"together {median(name, 0) + median(name, 1):.2f} ms")
    together = {name: median(name, 0) + median(name, 1) for name in losses}
    print(f"  ours / AllenNLP: {together['AllenNLP'] / together['ours']:.2f}x faster")
    print("  largest differences: " + ", ".join(f"{label} {value:.2e}" for label, value in largest.items()))


if __name__ == "__main__":
    main()
