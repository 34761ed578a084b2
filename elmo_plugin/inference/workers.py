"""
Several processes embedding one file, through torch.distributed (the engine AllenNLP's
distributed training uses): launched by `torchrun` (on one machine or many, sharing a file
system), or started here, `num_workers` local processes with the gloo backend.
On GPUs each process computes on its own (`device_of_this_process`); gloo carries only the
plan and the success flags, which live on the host.

The file engine (`embed_file`) runs the same code in every process: the first one (rank 0)
checks the input, prepares the partial output and tells the others what to do; each embeds its
share of the chunks; rank 0 merges them when all have succeeded. This module is the plumbing:
the process group, passing that plan around, and turning a worker's failure into one error.
"""
import contextlib
import logging
import multiprocessing
import os
import re
import signal
import socket
from typing import Any, Callable, Iterator, List, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing
from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def rank_and_world() -> Tuple[int, int]:
    """This process's rank and the number of processes (0, 1 outside torch.distributed)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@contextlib.contextmanager
def process_group_of_launcher() -> Iterator[None]:
    """
    Inside a `torchrun` launch (its environment variables set, no process group yet), joins
    the launched processes' group (gloo) for the duration; otherwise does nothing.
    """
    launched = all(name in os.environ for name in _LAUNCHER_VARIABLES) and int(os.environ["WORLD_SIZE"]) > 1
    if not launched or (dist.is_available() and dist.is_initialized()):
        yield
        return
    dist.init_process_group("gloo")
    try:
        yield
    finally:
        dist.destroy_process_group()


def device_of_this_process(device: torch.device) -> torch.device:
    """
    The GPU this process computes on when the embedder was made for `device`: the `LOCAL_RANK`-th
    one after it, round the machine's GPUs (so `--cuda-device 0` with 4 processes on a machine
    of 2 GPUs puts two on each). The CPU, and a single process, stay where they are.
    """
    rank, world = rank_and_world()
    if device.type != "cuda" or world == 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    first = device.index if device.index is not None else torch.cuda.current_device()
    return torch.device("cuda", (first + local_rank) % torch.cuda.device_count())


def from_first(make: Callable[[], Any]) -> Any:
    """
    `make()` run by rank 0 and its result given to every process; an exception it raises is
    raised in every process (the same error everywhere, so that all stop before any work).
    """
    rank, world = rank_and_world()
    result: Any = None
    if rank == 0:
        try:
            result = make()
        except Exception as error:  # given to the others, then raised here too
            result = error
    if world > 1:
        box = [result]
        dist.broadcast_object_list(box, src=0)
        result = box[0]
    if isinstance(result, Exception):
        raise result
    return result


def all_succeeded(succeeded: bool) -> bool:
    """Whether every process got here with `succeeded` (each process must call it)."""
    _, world = rank_and_world()
    if world == 1:
        return succeeded
    flag = torch.tensor([1 if succeeded else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def warn_if_gpus_shared(device: torch.device, num_workers: int) -> None:
    """A warning where `num_workers` processes would share GPUs (`device_of_this_process`):
    the GPU time-slices between processes, and each holds its own copy and CUDA context."""
    if device.type == "cuda" and num_workers > torch.cuda.device_count():
        logger.warning(
            "%d workers on %d GPU(s): several share a GPU, which runs one process at a time; "
            "this is rarely faster than one worker per GPU and takes each worker's memory "
            "(BENCHMARKS.md, \"On an H100\"). Use --num-workers %d.",
            num_workers, torch.cuda.device_count(), torch.cuda.device_count(),
        )


def spawn_workers(run: Callable[[Any], None], embedder: Any, num_workers: int, output_path: str) -> None:
    """
    Starts `num_workers` local processes in one gloo group, each calling `run(embedder)` with
    its own copy of `embedder` (its tensors shared through torch.multiprocessing) and its
    share of the CPU's threads, and waits for them. A worker's error stops the run and is
    raised here as one error naming the worker; the finished chunks stay in `OUTPUT.partial`
    for `--resume`.
    """
    cores = os.cpu_count() or 1
    if num_workers > cores:
        logger.warning(
            "%d workers on %d CPU cores: each loads the biLM and competes for the cores, so the "
            "run is slower and takes more memory than with %d; use --num-workers %d or fewer.",
            num_workers, cores, cores, cores,
        )
    port = _free_port()
    threads = max(1, cores // num_workers)
    context = torch.multiprocessing.start_processes(
        _worker, args=(num_workers, port, threads, run, embedder), nprocs=num_workers, join=False,
        start_method="spawn",
    )
    try:
        while not context.join():
            pass
    except torch.multiprocessing.ProcessRaisedException as error:
        raise _worker_error(str(error), output_path) from None
    except torch.multiprocessing.ProcessExitedException as error:
        raise RuntimeError(
            f"Embedding worker {error.error_index} of {num_workers} died ({_exit_reason(error)}); "
            f"the others were stopped. Finished chunks are kept in {output_path}.partial: run the "
            "same command with --resume."
        ) from None
    except BaseException:  # Ctrl-C, SIGTERM (AllenNLP's SigTermReceived): no worker outlives us
        stop_processes(context.processes)
        raise
    finally:
        _remove_error_files(context)


def _remove_error_files(context: Any) -> None:
    # torch gives each worker a temporary file for its traceback, read by `join` and never
    # removed: a run stopped by a worker's error would leave one in the system's temporary
    # directory at every failed run.
    for path in getattr(context, "error_files", ()):
        with contextlib.suppress(OSError):
            os.unlink(path)


# Seconds a worker has to finish cleanly (release the output's lock) after SIGTERM.
_STOP_GRACE_SECONDS = 30


def stop_processes(processes: List[Any]) -> None:
    """SIGTERM to every living process, then SIGKILL to any still alive after the grace time."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(_STOP_GRACE_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()


def _exit_on_sigterm(signal_number: int, frame: Any) -> None:
    raise SystemExit(128 + signal_number)  # unwinds: the output's lock is released, files closed


def _worker(rank: int, world: int, port: int, threads: int, run: Callable, embedder: Any) -> None:
    # The parent decides when the run stops (Ctrl-C reaches the whole process group) and
    # stops the workers with SIGTERM, which each one leaves through its clean-up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _stop_when_the_parent_dies()
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        run(embedder)
    finally:
        dist.destroy_process_group()


def _stop_when_the_parent_dies() -> None:
    # torch asks Linux to send a worker SIGINT when its parent dies, which the worker ignores
    # (above): a parent killed outright (kill -9, the out-of-memory killer) would leave its
    # workers running on, and a rerun with --resume beside them. SIGTERM instead: they stop
    # as when the parent stops them, leaving the finished chunks for --resume.
    set_parent_death_signal = getattr(torch.multiprocessing, "_prctl_pr_set_pdeathsig", None)
    if set_parent_death_signal is not None:
        set_parent_death_signal(signal.SIGTERM)
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before the request was made
        raise SystemExit(128 + signal.SIGTERM)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker_error(report: str, output_path: str) -> Exception:
    """One error from a worker's traceback report: its last line, as the same error type for
    a `ConfigurationError` (a bad input, found by the first worker)."""
    lines = [line for line in report.strip().splitlines() if line.strip()]
    worker = re.search(r"process (\d+) terminated", report)
    last = lines[-1] if lines else report
    type_name, _, message = last.partition(": ")
    if type_name.endswith("ConfigurationError"):
        return ConfigurationError(message)
    who = f"worker {worker.group(1)}" if worker else "a worker"
    return RuntimeError(
        f"Embedding {who} failed: {last}. Finished chunks are kept in {output_path}.partial: "
        "run the same command with --resume."
    )


def _exit_reason(error: "torch.multiprocessing.ProcessExitedException") -> str:
    signal_name = getattr(error, "signal_name", None)
    return f"signal {signal_name}" if signal_name else f"exit code {error.exit_code}"
