"""
What lets an interrupted `embed_file` run continue (`resume`): the settings a resumed run must
share with the one it continues (`RunSettings`, in `OUTPUT.partial/settings.json`), the finished
chunks found intact there, the carried state saved with each chunk, and the lock that keeps a
second run off the same output.
"""
import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import filelock
import h5py
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.atomic_file import write_text_atomically
from elmo_plugin.inference.hdf5_output import CARRIED_STATE, chunk_name
from elmo_plugin.modules.start_state import BatchStartState

logger = logging.getLogger(__name__)


@dataclass
class RunSettings:
    """Everything a resumed run must share with the run it continues."""

    input_path: str
    input_size: int
    input_sha256: str
    output_format: str
    batch_size: Optional[int]
    max_tokens_per_batch: int
    chunk_size: int
    stateful: bool
    use_sentence_keys: bool
    allow_empty_lines: bool
    shard_size: Optional[int]
    dtype: str
    compression: Optional[str]
    mix: Optional[List[float]]  # the weights, then gamma
    sentence_vectors: Optional[str]
    model: str
    precision: str
    device: str


@contextlib.contextmanager
def sole_writer(output_path: str) -> Iterator[None]:
    """Holds `OUTPUT.lock` for the run: a second run on the same output is refused."""
    lock_path = output_path + ".lock"
    lock = filelock.FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout as error:
        raise ConfigurationError(
            f"Another process is writing {output_path} (it holds {lock_path}); wait for it to "
            "finish, or write to another output"
        ) from error
    try:
        yield
    finally:
        lock.release()
        with contextlib.suppress(OSError):
            os.remove(lock_path)


def prepare_partial_dir(partial_dir: str, settings: RunSettings, resume: bool) -> Set[int]:
    manifest_path = os.path.join(partial_dir, "settings.json")
    if resume and os.path.exists(manifest_path):
        earlier, current = _read_manifest(partial_dir, manifest_path), asdict(settings)
        if earlier != current:
            # Over both runs' keys: a manifest of another version of this package may lack one.
            differing = sorted(k for k in set(earlier) | set(current) if earlier.get(k) != current.get(k))
            if differing and set(differing) <= {"input_size", "input_sha256"}:
                raise ConfigurationError(
                    f"Cannot resume from {partial_dir}: {settings.input_path} has changed since the "
                    "interrupted run read it (its size or content differ), and its finished chunks "
                    "hold the old text's vectors. Restore the input, or pass --overwrite to start "
                    "over with the new text"
                )
            raise ConfigurationError(
                f"Cannot resume from {partial_dir}: it was started with different "
                f"{', '.join(differing)} (a resumed run must compute what the first one did); "
                "pass --overwrite to start over"
            )
        for name in os.listdir(partial_dir):
            if name.startswith("."):  # a chunk that was being written when the run stopped
                os.remove(os.path.join(partial_dir, name))
        done = {
            int(name[len("chunk_") : -len(".hdf5")])
            for name in os.listdir(partial_dir)
            if name.startswith("chunk_") and name.endswith(".hdf5")
        }
        logger.info("Resuming: %d finished chunks in %s", len(done), partial_dir)
        return done
    if resume:
        logger.info("Nothing to resume at %s; starting from the beginning", partial_dir)
    os.makedirs(partial_dir, exist_ok=True)
    write_text_atomically(manifest_path, json.dumps(asdict(settings), indent=2))
    return set()


def _read_manifest(partial_dir: str, manifest_path: str) -> Dict[str, Any]:
    problem = None
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            earlier = json.load(handle)
        if not isinstance(earlier, dict):
            problem = f"a JSON {type(earlier).__name__}, not an object"
    except ValueError as error:  # not JSON, or not UTF-8
        problem = str(error)
    if problem is not None:
        raise ConfigurationError(
            f"Cannot resume from {partial_dir}: {manifest_path} is not the settings an interrupted "
            f"run writes ({problem}); pass --overwrite to start over"
        )
    return earlier


def intact_chunks(partial_dir: str, done: Set[int], chunk_size: int, num_lines: int) -> Set[int]:
    """
    The finished chunks that hold every line they should; a damaged one (a power loss before
    its data reached the disk, a file changed by hand) is removed, to be embedded again.
    """
    intact = set()
    for chunk_index in sorted(done):
        path = os.path.join(partial_dir, chunk_name(chunk_index))
        expected = {str(i) for i in range(chunk_index * chunk_size, min((chunk_index + 1) * chunk_size, num_lines))}
        try:
            with h5py.File(path, "r") as handle:
                keys = {name for name in handle if not name.startswith("_")}
        except OSError as error:
            problem = f"unreadable ({error})"
        else:
            if keys == expected:
                intact.add(chunk_index)
                continue
            problem = f"holds {len(keys & expected)} of its {len(expected)} lines"
        logger.warning("%s is damaged: %s; embedding that chunk again", path, problem)
        os.remove(path)
    return intact


def restore_carried_state(start_state: BatchStartState, chunk_path: str) -> None:
    """The carried state as it was at the end of the chunk `chunk_path`."""
    carried: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    with h5py.File(chunk_path, "r") as handle:
        if "_carried_state_h" in handle:
            carried = tuple(  # type: ignore
                torch.from_numpy(handle[name][...]) for name in CARRIED_STATE
            )
    start_state.set(carried)
