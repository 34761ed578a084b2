"""
Where training's large CPU tensors get their memory: kept by the C allocator between steps
instead of handed back to the kernel and faulted in again, page by page, at the next step.

glibc's `malloc` serves blocks above its mmap threshold (128 KiB, rising to at most 32 MiB)
with fresh `mmap`s and unmaps them when freed, and trims the heap's free top. A biLM training
step allocates and frees the same hundreds of MB every step (the char CNN's products and
their gradients, the sampled softmax's logits): every page of them is zero-filled by the
kernel again, a large share of a step on the machines measured (BENCHMARKS.md).
`keep_freed_memory_for_reuse` tells glibc to serve large blocks from its heap and to keep
freed memory (up to `KEPT_BYTES` at the heap's top) for the next step, as `allennlp train`
users can also do by hand (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...`, or PyTorch's
`THP_MEM_ALLOC_ENABLE=1` before the process starts).

The price is memory: nothing is returned to the system while the process lives, and a request
that fits none of the holes that freed blocks left between longer-lived ones extends the heap,
so the heap can grow over a run. Blocks that take the same size at every step let it reuse its
holes (the char encoder's training chunks, `TOKENS_PER_TRAINING_CHUNK`). The faults it saves
matter most where a step's blocks are larger than glibc's largest mmap threshold (32 MiB; many
streams). BENCHMARKS.md ("Training memory over a long run") compares both allocators' peak and
speed, and `benchmarks/train_bilm.py memory` measures them on another machine. Handing the
heap's free pages back every few steps (`malloc_trim`) cost more speed than it saved memory.

A process-wide setting, made once, on the CPU with glibc only, logged at INFO;
`ELMO_PLUGIN_MALLOC=system` leaves the allocator as it is.
"""
import ctypes
import functools
import logging
import os
import platform
import sys

logger = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "ELMO_PLUGIN_MALLOC"
KEEP = "keep"
SYSTEM = "system"
# `mallopt` takes an int: the largest freed top of the heap kept rather than trimmed.
KEPT_BYTES = 2**31 - 1
# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

_applied = False


def mode() -> str:
    """`keep` (the default) or `system`, from `ELMO_PLUGIN_MALLOC`."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, KEEP)
    if value not in (KEEP, SYSTEM):
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: expected one of {(KEEP, SYSTEM)}")
    return value


@functools.lru_cache(maxsize=None)
def glibc_on_linux() -> bool:
    """Whether this process runs on Linux with glibc (`platform.libc_ver` reads the
    interpreter's binary, so once per process)."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def keep_freed_memory_for_reuse() -> bool:
    """
    Serve large blocks from glibc's heap and keep freed memory in the process (see the module's
    docstring), once per process. Returns whether the setting is in force: `False` with
    `ELMO_PLUGIN_MALLOC=system`, on another C library or platform, or if glibc refused it.
    """
    global _applied
    if mode() == SYSTEM:
        return False
    if _applied:
        return True
    if not glibc_on_linux():
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        accepted = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, KEPT_BYTES) == 1
    except (OSError, AttributeError) as error:
        logger.info("glibc's mallopt could not be called (%s): the allocator is left as it is.", error)
        return False
    if not accepted:
        logger.info("glibc refused the allocator setting for training: the allocator is left as it is.")
        return False
    _applied = True
    logger.info(
        "Training on the CPU: glibc's malloc now serves large blocks from its heap and keeps freed "
        "memory for the next step instead of handing it back "
        "(%s=%s leaves the allocator as it is).", ENVIRONMENT_VARIABLE, SYSTEM,
    )
    return True
