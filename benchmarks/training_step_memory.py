"""
What a training step's peak memory holds: the tensors alive at the peak of the memory torch
tracks during one step of `train_bilm.py speed`'s setting (after warm-up steps), grouped by the
operation that made them, the line of the package that called it, and their category
(parameter, optimizer state, gradient, activation, ...).

    python benchmarks/training_step_memory.py --streams 32
    python benchmarks/training_step_memory.py --streams 32 --architecture original
    python benchmarks/training_step_memory.py --streams 32 --precision bfloat16

It reads torch's profiler (`profile_memory`) through its memory profile
(`torch.profiler._memory_profiler`, a private module of torch 2.13): the public API gives each
operation's net allocations, not what is alive at the peak. The process's RSS (`train_bilm.py
speed`) is higher: it adds what the C allocator keeps for reuse and memory outside tensors.

Needs ../shared/data (brown.zip).
"""
import argparse
import collections
import os
import sys
import tempfile
from typing import Dict, Optional, Tuple

import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

sys.path.insert(0, os.path.dirname(__file__))
from train_bilm import ARCHITECTURE_OPTIONS, TRAINING_PRECISIONS, brown_training  # noqa: E402

_PACKAGE_PATH = "elmo_plugin/"


def _caller(event) -> str:
    """The operation's name and the nearest line of the package above it; an operation of a
    backward pass (no such line) by its own name, which names the autograd node."""
    parent = event
    while parent is not None:
        if _PACKAGE_PATH in parent.name:
            return f"{event.name} at {parent.name[parent.name.index(_PACKAGE_PATH):]}"
        parent = parent.parent
    return event.name


def live_at_peak(memory_profile) -> Tuple[int, Dict[object, int]]:
    """The peak of the CPU tensors' bytes over the profile's timeline, and the tensors alive then
    (their keys and sizes)."""
    live: Dict[object, int] = {}
    current = peak = 0
    at_peak: Dict[object, int] = {}
    for _, action, (key, _), size in memory_profile.timeline:
        if key.device.type != "cpu":
            continue
        if action in (Action.PREEXISTING, Action.CREATE):
            live[key] = size
            current += size
        elif action == Action.DESTROY:
            current -= live.pop(key, 0)
        if current > peak:
            peak, at_peak = current, dict(live)
    return peak, at_peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=6, help="steps run before the measured one")
    parser.add_argument("--architecture", default="small", choices=sorted(ARCHITECTURE_OPTIONS))
    parser.add_argument("--precision", default="float32", choices=TRAINING_PRECISIONS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20, help="groups printed, largest first")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        _, _, steps, _, _ = brown_training(directory, args.streams, precision=args.precision,
                                           architecture=args.architecture, max_steps=args.warmup + 1)
        for _ in range(args.warmup):
            next(steps)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as profiler:
            next(steps)
    memory_profile = profiler._memory_profile()
    peak, at_peak = live_at_peak(memory_profile)
    made_by: Dict[object, Optional[object]] = {}
    for node in memory_profile._data_flow_graph.flow_nodes:
        for key, version in node.outputs.items():
            if version == 0:
                made_by.setdefault(key, node._event)
    groups: Dict[Tuple[str, str], int] = collections.Counter()
    for key, size in at_peak.items():
        category = memory_profile._categories.get(key, 0)
        category_name = getattr(category, "name", "unknown")
        event = made_by.get(key)
        groups[(category_name, "made before the step" if event is None else _caller(event))] += size
    print(f"{args.architecture} architecture, {args.precision}, {args.streams} streams, {args.threads} threads: "
          f"the tensors alive at the step's peak, {peak / 2**20:,.0f} MB")
    for (category_name, made), size in sorted(groups.items(), key=lambda item: -item[1])[: args.rows]:
        print(f"{size / 2**20:9.1f} MB  {category_name:<16} {made}")


if __name__ == "__main__":
    main()
