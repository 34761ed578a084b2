"""
Two independent pieces of CPU work side by side: the calling thread runs one, a worker thread
the other, each with half of `torch.get_num_threads()`.

The biLM's two directions never read each other's outputs. For one sentence at a time, each
step is many small operations that one thread cannot spread over cores, and two directions
side by side keep two cores busy (BENCHMARKS.md). On a GPU the same was tried with two CUDA
streams and gained nothing (the host launching kernels is the bottleneck, and the GIL
serialises the launches), so this is CPU-only.
"""
import os
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, Optional, Tuple, TypeVar

import torch

# The two ways of running two pieces of work, as `choice.fastest` names them.
SIDE_BY_SIDE, ONE_AFTER_THE_OTHER = "side by side", "one after the other"

First = TypeVar("First")
Second = TypeVar("Second")

# Per process (pid, executor): runs the second piece of work.
_worker: Optional[Tuple[int, ThreadPoolExecutor]] = None


def _executor() -> ThreadPoolExecutor:
    # A forked child (e.g. a data-loader worker) inherits the executor but not its thread,
    # and work submitted to it would wait forever: each process makes its own.
    global _worker
    if _worker is None or _worker[0] != os.getpid():
        _worker = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-side-by-side"))
    return _worker[1]


def can_run_side_by_side(device: torch.device, records_graph: bool, draws_random_numbers: bool) -> bool:
    """
    Whether two pieces of work on `device` may run side by side: on the CPU with two or more
    threads, where autograd records nothing and nothing random happens (so that results do not
    depend on thread timing), outside CPU autocast (a per-thread setting).
    """
    return (
        device.type == "cpu"
        and torch.get_num_threads() >= 2
        and not records_graph
        and not draws_random_numbers
        and not torch.is_autocast_enabled("cpu")
    )


def run_side_by_side(first: Callable[[], First], second: Callable[[], Second]) -> Tuple[First, Second]:
    """
    Runs `first` in the calling thread and `second` in the worker thread, each with half of
    the process's torch threads (a process-wide setting, restored afterwards), and returns both
    results. Inference mode is carried into the worker.
    """
    threads = torch.get_num_threads()
    threads_each = threads // 2
    inference_mode = torch.is_inference_mode_enabled()

    def in_worker() -> Second:
        # Thread counts and inference mode are per thread: the worker takes the caller's.
        torch.set_num_threads(threads_each)
        with torch.inference_mode(inference_mode), torch.no_grad():
            return second()

    torch.set_num_threads(threads_each)
    second_result = _executor().submit(in_worker)
    try:
        first_result = first()
    finally:
        wait([second_result])
        torch.set_num_threads(threads)
    return first_result, second_result.result()
