"""
Training speed of the LSTM stack: our `ElmoLstm` against AllenNLP's, interleaved in one process.

    python benchmarks/lstm_training_speed.py [--passes 5] [--threads 2] [--device cuda]

One training pass = forward with gradients, a loss on every output, backward. Both stacks get
the same weights (random, with cell and projection clipping and residual connections, as in
the published models) and the same inputs and masks; they run back to back in every pass, so
machine drift hits both alike. Printed per shape: median milliseconds per pass, the ratio, and
the largest differences between the outputs and between the gradients (relative to the
largest gradient), which must be float32 rounding.

Shapes:
- the biLM recipe (`train_bilm.py`): the published small architecture (cell 1024, projection
  128), full windows of 20 tokens, 32 streams (what 2 cores afford) and 128 (bilm-tf's);
- fine-tuning the original architecture (cell 4096, projection 512) inside a task model:
  16 sentences of 10-30 tokens (padding), the case where the biLM is trained with the task.
"""
import argparse
import statistics
import time
from typing import Dict, List, Tuple

import torch
from allennlp.modules.elmo_lstm import ElmoLstm as AllenNlpElmoLstm
from embed_speed import synchronize

from elmo_plugin.modules.elmo_lstm import ElmoLstm

# (description, batch size, window or (shortest, longest) sentence, input/projection, cell)
SHAPES = [
    ("small biLM, 32 streams x 20", 32, (20, 20), 128, 1024),
    ("small biLM, 128 streams x 20", 128, (20, 20), 128, 1024),
    ("original biLM fine-tuned, 16 sentences of 10-30", 16, (10, 30), 512, 4096),
]


def training_pass(lstm: torch.nn.Module, inputs: torch.Tensor, mask: torch.Tensor,
                  ours: bool) -> Tuple[torch.Tensor, float]:
    for parameter in lstm.parameters():
        parameter.grad = None
    synchronize(inputs.device)
    start = time.perf_counter()
    if ours:
        outputs, _ = lstm.forward_with_state(inputs, mask, lstm.zero_state(inputs.size(0), inputs))
    else:
        lstm.reset_states()
        outputs = lstm(inputs, mask)
    outputs.pow(2).sum().backward()
    synchronize(inputs.device)
    return outputs.detach(), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (float32, TF32 off)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{args.threads} threads"
    print(f"{where}, forward + backward, median of {args.passes} passes")
    print(f"{'shape':50s} {'allennlp ms':>12} {'ours ms':>8} {'ratio':>6} "
          f"{'output diff':>12} {'grad diff':>10}")
    for description, batch_size, (shortest, longest), size, cell_size in SHAPES:
        torch.manual_seed(0)
        theirs = AllenNlpElmoLstm(size, size, cell_size, 2, requires_grad=True,
                                  memory_cell_clip_value=3.0, state_projection_clip_value=3.0)
        ours = ElmoLstm(size, size, cell_size, 2, requires_grad=True,
                        memory_cell_clip_value=3.0, state_projection_clip_value=3.0)
        ours.load_state_dict(theirs.state_dict())
        theirs.to(device)
        ours.to(device)
        inputs = torch.randn(batch_size, longest, size)
        lengths = torch.randint(shortest, longest + 1, (batch_size,))
        lengths[0] = longest
        mask = torch.arange(longest) < lengths.unsqueeze(1)
        inputs, mask = (inputs * mask.unsqueeze(-1)).to(device), mask.to(device)
        times: Dict[str, List[float]] = {"allennlp": [], "ours": []}
        for _ in range(args.passes + 1):  # the first pass warms up, not counted
            their_outputs, their_time = training_pass(theirs, inputs, mask, ours=False)
            our_outputs, our_time = training_pass(ours, inputs, mask, ours=True)
            times["allennlp"].append(their_time)
            times["ours"].append(our_time)
        output_difference = (their_outputs - our_outputs).abs().max().item()
        their_gradients = dict(theirs.named_parameters())
        gradient_difference = max(
            ((their_gradients[name].grad - parameter.grad).abs().max()
             / their_gradients[name].grad.abs().max()).item()
            for name, parameter in ours.named_parameters()
        )
        their_ms = 1e3 * statistics.median(times["allennlp"][1:])
        our_ms = 1e3 * statistics.median(times["ours"][1:])
        print(f"{description:50s} {their_ms:>12.1f} {our_ms:>8.1f} {their_ms / our_ms:>6.2f} "
              f"{output_difference:>12.1e} {gradient_difference:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
