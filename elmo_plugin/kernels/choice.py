"""
The float32 kernel of each product, and the way of running the LSTM's two directions, chosen
on the machine that runs them.

Which of MKL's product (`functional.linear`), oneDNN's (`onednn`) and MKL's packed single-row
product (`mkl_packed`) is fastest depends on the CPU (AVX512 or AVX2 only, cache sizes), the
thread count and the shape, and a table measured on one CPU was wrong on another
(BENCHMARKS.md). So the first product of each shape class in a process times the candidates
on its own inputs and keeps the fastest; a class is the product's role, its weight's shape,
and its row-count class (1, 2-8, 9-64, 65-512, more).

The accuracy rule (the oracle tests' bound, per product): a candidate whose largest error
against the float64 product is above `ACCURACY_FACTOR` times that of `functional.linear` (what
AllenNLP computes with), plus a few ulps, is not eligible, whatever its speed.

Decisions are kept in `CACHE_PATH` (under AllenNLP's cache root), keyed by the CPU's model and
flags and the torch version, so that later processes on the machine compute with the same
kernels, without measuring again: the worker processes of one `allennlp elmo` run and a
resumed run give the bytes of one process. A file lock makes the processes of a machine
measure each class once. Each decision is logged once per process at INFO.

Ways of running a piece of work that give the same results are chosen the same way
(`fastest`), timed in turns on the whole piece: the LSTM's directions side by side or one after
the other, at a few rows (`ElmoLstm.directions_side_by_side`), which depends on how fast one
thread runs a precision's products on the CPU (BENCHMARKS.md).

`ELMO_PLUGIN_KERNEL_CHOICE=fixed` (or `set_mode("fixed")`) turns the choice off: the table of
`products` (oneDNN for the wide products, MKL for the projections, MKL packed at one row), and
the directions side by side.
"""
import functools
import hashlib
import json
import logging
import os
import platform
import re
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

import filelock
import torch
from allennlp.common.file_utils import CACHE_ROOT

from elmo_plugin.common.atomic_file import write_text_atomically
from elmo_plugin.kernels.onednn import Product

logger = logging.getLogger(__name__)

MEASURE, FIXED = "measure", "fixed"
MODES = (MEASURE, FIXED)
ENVIRONMENT_VARIABLE = "ELMO_PLUGIN_KERNEL_CHOICE"
CACHE_PATH = CACHE_ROOT / "elmo_plugin" / "kernel_choice.json"
ACCURACY_FACTOR = 2.0
# The rows a measurement uses at most (the char CNN's products have tens of thousands).
_MEASURED_ROWS = 2048
# Timed turns of each candidate product, and of each way of running a piece of work
# (`fastest`, which runs the whole piece every turn).
_PRODUCT_TURNS = 5
_WAY_TURNS = 3

_mode: Optional[str] = None
_decisions: Dict[str, str] = {}
# Decisions that callers look up at every product by a key of their own (the training
# products, `recorded_products`), without building a name; cleared with the rest.
call_site_decisions: Dict[Any, str] = {}
_lock = threading.Lock()
_warned_about_cache = False


def mode() -> str:
    """`"measure"` (the default) or `"fixed"`, from `set_mode` or the environment."""
    if _mode is not None:
        return _mode
    value = os.environ.get(ENVIRONMENT_VARIABLE, MEASURE).strip().lower()
    if value not in MODES:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: expected one of {MODES}")
    return value


def set_mode(value: Optional[str]) -> None:
    """Overrides the environment for this process (`None`: back to the environment)."""
    global _mode
    if value is not None and value not in MODES:
        raise ValueError(f"kernel choice mode {value!r}: expected one of {MODES}")
    _mode = value
    call_site_decisions.clear()


def forget_decisions() -> None:
    """Clears this process's decisions (not the machine's cache file): for tests."""
    global _warned_about_cache
    with _lock:
        _decisions.clear()
        call_site_decisions.clear()
        _warned_about_cache = False


def row_class(rows: int) -> str:
    for limit in (1, 8, 64, 512):
        if rows <= limit:
            return str(limit)
    return "many"


@functools.lru_cache(maxsize=None)
def cpu_identity() -> str:
    """The CPU's model, flags and core count and the torch version: what a decision holds for."""
    model, flags = platform.processor(), ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            text = info.read()
        found = re.search(r"model name\s*:\s*(.*)", text)
        model = found.group(1).strip() if found else model
        found = re.search(r"flags\s*:\s*(.*)", text)
        flags = " ".join(sorted(set(found.group(1).split()))) if found else ""
    except OSError:
        pass
    digest = hashlib.sha256(f"{model}|{flags}|{os.cpu_count()}".encode()).hexdigest()[:16]
    return f"{model} [{digest}] torch {torch.__version__}"


def chosen(
    key: Tuple[str, Tuple[int, int], str],
    candidates: Dict[str, Product],
    inputs: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
) -> str:
    """
    The name of the candidate to use for the product class `key` (role, weight shape, row
    class): decided before in this process, read from the machine's cache, or measured now
    on `inputs` (and cached). `candidates` holds `functional.linear` as `"mkl"`.
    """
    # Not keyed by the thread count: the worker processes of a run (fewer threads each) must
    # compute with the kernels of the single process whose bytes they reproduce.
    # The candidates too: a one-row step inside a batch has no packed weight to choose.
    name = f"{key[0]} {key[1][0]}x{key[1][1]} rows<={key[2]} from {'/'.join(sorted(candidates))}"
    decided = _decisions.get(name)
    if decided is not None and decided in candidates:
        return decided
    with _lock:  # the two directions side by side ask at once
        decided = _decisions.get(name)
        if decided is None or decided not in candidates:
            decided = _decide(name, candidates, inputs, weight, bias)
            _decisions[name] = decided
    return decided


def _decide(name: str, candidates: Dict[str, Product], inputs: torch.Tensor, weight: torch.Tensor,
            bias: Optional[torch.Tensor]) -> str:
    identity = cpu_identity()
    try:
        with _cache_lock():
            cache = _read_cache()
            cached = cache.get(identity, {}).get(name)
            if cached in candidates:
                logger.info("Kernel for %s: %s (decided before on this CPU, %s)", name, cached, CACHE_PATH)
                return cached
            decided = _measure(name, candidates, inputs, weight, bias)
            cache.setdefault(identity, {})[name] = decided
            _write_cache(cache)
            return decided
    except (OSError, filelock.Timeout) as error:
        _warn_that_the_cache_cannot_be_used(error)
        return _measure(name, candidates, inputs, weight, bias)


def fastest(name: str, candidates: Dict[str, Callable[[], Any]]) -> str:
    """
    The name of the fastest of `candidates`: ways of doing one piece of work, with the same
    results, rather than products (the LSTM's two directions side by side or one after the
    other), for the work class `name`. Decided before in this process, read from the machine's
    cache, or timed now (`timed_in_turns`) and cached.

    No lock is held while timing: a candidate may run work in another thread that asks for its
    products' kernels itself. Two processes may then time one class at once; the first to
    write its decision to the cache decides for both.
    """
    name = f"{name} from {'/'.join(sorted(candidates))}"
    decided = _decisions.get(name)
    if decided in candidates:
        return decided
    identity = cpu_identity()
    try:
        with _cache_lock():
            decided = _read_cache().get(identity, {}).get(name)
        cache_usable = True
    except (OSError, filelock.Timeout) as error:
        _warn_that_the_cache_cannot_be_used(error)
        decided, cache_usable = None, False
    if decided in candidates:
        logger.info("Way to run %s: %s (decided before on this CPU, %s)", name, decided, CACHE_PATH)
    else:
        seconds = timed_in_turns(candidates, _WAY_TURNS)
        decided = min(seconds, key=lambda label: seconds[label])
        logger.info("Way to run %s: %s, measured on this CPU (%s)", name, decided,
                    ", ".join(f"{label} {seconds[label] * 1e3:.1f} ms" for label in candidates))
        if cache_usable:
            decided = _remember(identity, name, decided, candidates)
    with _lock:
        return _decisions.setdefault(name, decided)


def _remember(identity: str, name: str, decided: str, candidates: Dict[str, Any]) -> str:
    """Writes `decided` to the cache, unless another process wrote a decision first: the one
    the cache then holds."""
    try:
        with _cache_lock():
            cache = _read_cache()
            earlier = cache.get(identity, {}).get(name)
            if earlier in candidates:
                return earlier
            cache.setdefault(identity, {})[name] = decided
            _write_cache(cache)
    except (OSError, filelock.Timeout) as error:
        _warn_that_the_cache_cannot_be_used(error)
    return decided


def timed_in_turns(candidates: Dict[str, Callable[[], Any]], turns: int) -> Dict[str, float]:
    """The least of `turns` timings of each candidate, run in turns after one run of each to
    warm up, so that the machine's drift reaches them alike."""
    for run in candidates.values():
        run()
    best = {label: float("inf") for label in candidates}
    for _ in range(turns):
        for label, run in candidates.items():
            start = time.perf_counter()
            run()
            best[label] = min(best[label], time.perf_counter() - start)
    return best


def _cache_lock() -> filelock.FileLock:
    CACHE_PATH.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(CACHE_PATH) + ".lock", timeout=600)


def _warn_that_the_cache_cannot_be_used(error: Exception) -> None:
    global _warned_about_cache
    if not _warned_about_cache:
        _warned_about_cache = True
        logger.warning("The kernel choice cache %s cannot be used (%s): choosing for this process only; "
                       "other processes may choose differently.", CACHE_PATH, error)


def _read_cache() -> Dict[str, Dict[str, str]]:
    try:
        with open(CACHE_PATH, encoding="utf-8") as file:
            cache = json.load(file)
        return cache if isinstance(cache, dict) else {}
    except FileNotFoundError:
        return {}
    except ValueError:
        logger.warning("The kernel choice cache %s is not JSON; measuring again.", CACHE_PATH)
        return {}


def _write_cache(cache: Dict[str, Dict[str, str]]) -> None:
    write_text_atomically(str(CACHE_PATH), json.dumps(cache, indent=1, sort_keys=True))


def _measure(name: str, candidates: Dict[str, Product], inputs: torch.Tensor, weight: torch.Tensor,
             bias: Optional[torch.Tensor]) -> str:
    sample = inputs.reshape(-1, inputs.size(-1))[:_MEASURED_ROWS]
    if sample.dim() == 2 and sample.stride(0) == 1 and sample.size(0) > 1:
        # In the inputs' layout: a training product reads a transposed operand in place, and
        # its first rows alone, a transposed operand with gaps, would be timed on a slow path.
        sample = sample.t().contiguous().t()
    exact = torch.nn.functional.linear(sample.double(), weight.double(), None if bias is None else bias.double())
    errors = {label: (product(sample).double() - exact).abs().max().item() for label, product in candidates.items()}
    # Plus a few float32 ulps of the outputs' size, so that an error of 0 by luck (a short
    # sum) does not make every other order of adding ineligible.
    bound = ACCURACY_FACTOR * errors["mkl"] + 4 * torch.finfo(torch.float32).eps * exact.abs().max().item()
    eligible = [label for label in candidates if label == "mkl" or errors[label] <= bound]
    seconds = timed_in_turns({label: functools.partial(candidates[label], sample) for label in eligible},
                             _PRODUCT_TURNS)
    decided = min(eligible, key=lambda label: seconds[label])
    logger.info(
        "Kernel for %s: %s, measured on this CPU (%s; largest errors against float64: %s)", name, decided,
        ", ".join(f"{label} {seconds[label] * 1e3:.3f} ms" for label in eligible),
        ", ".join(f"{label} {error:.1e}" for label, error in errors.items()),
    )
    return decided
