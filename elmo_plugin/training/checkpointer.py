"""
AllenNLP's checkpointer, writing each checkpoint file so that it appears only complete.
"""
import errno
import io
import os
from typing import Any, BinaryIO, Optional, Union

import filelock
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import Trainer
from overrides import overrides

from elmo_plugin.common.atomic_file import atomic_output_path


@Checkpointer.register("atomic")
class AtomicCheckpointer(Checkpointer):
    """
    AllenNLP's `Checkpointer` (every option, e.g. `save_every_num_seconds`, and its retention
    of the most recent checkpoints), except how the two files of a checkpoint are written.
    AllenNLP's writes them in place: a kill or a full disk in the middle leaves a truncated file
    under a checkpoint's name, which `--recover` then loads and fails on, every time. Here each
    is written to a temporary name, flushed to the disk and renamed (`atomic_output_path`), the
    model state last, since its name is what marks a checkpoint as there. A failed write leaves
    the previous checkpoint as the latest and says what happened.

    One trainer per serialization directory: the (first) process holds `.trainer.lock` there
    from the checkpointer's construction to its exit (the system releases it on any exit), so
    a second `allennlp train --recover` into a directory in use stops before its first step
    instead of both writing `best.th`.
    """

    def __init__(self, serialization_dir: Union[str, os.PathLike], **kwargs) -> None:
        super().__init__(serialization_dir, **kwargs)
        self._trainer_lock: Optional[filelock.FileLock] = None
        if self._rank == 0:
            self._trainer_lock = _hold_trainer_lock(str(serialization_dir))

    @overrides
    def save_checkpoint(self, trainer: Trainer) -> None:
        state = None if self._serialization_dir is None else trainer.get_checkpoint_state()
        if state is not None:
            epochs = state.trainer_state["epochs_completed"]
            batches = state.trainer_state["batches_in_epoch_completed"]
            # Replaced if there: a training state left by a checkpoint that failed at its model
            # state is not this run's.
            _save_atomically(state.trainer_state, self._training_state_path(epochs, batches))
            _save_atomically(state.model_state, self._model_state_path(epochs, batches))
        # AllenNLP's own method finds both files there and keeps only its bookkeeping:
        # when it saved last, and removing the checkpoints it does not keep.
        super().save_checkpoint(trainer)


TRAINER_LOCK_NAME = ".trainer.lock"


def _hold_trainer_lock(serialization_dir: str) -> filelock.FileLock:
    lock_path = os.path.join(serialization_dir, TRAINER_LOCK_NAME)
    # One lock object per path in a process (filelock's singletons): training again into the
    # same directory from the same process (a notebook, a test) is not another trainer.
    lock = filelock.FileLock(lock_path, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise ConfigurationError(
            f"Another process is training into {serialization_dir} (it holds {lock_path}): two "
            "trainers in one serialization directory overwrite each other's checkpoints. Wait for "
            "it to finish (then --recover), or train into another directory (-s)."
        ) from None
    return lock


class _RecordingWriter(io.RawIOBase):
    """
    A file's writes, keeping the `OSError` of one that fails: torch's writer turns it into a
    `RuntimeError` that no longer says why (a full disk, a file-size limit).
    """

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__()
        self._handle = handle
        self.error: Optional[OSError] = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        try:
            return self._handle.write(data)
        except OSError as error:
            self.error = error
            raise


def _save_atomically(value: Any, path: str) -> None:
    try:
        with atomic_output_path(path, suffix=".tmp") as temporary_path:
            with open(temporary_path, "wb") as handle:
                writer = _RecordingWriter(handle)
                try:
                    torch.save(value, writer)
                except RuntimeError as error:
                    if writer.error is None:
                        raise
                    raise writer.error from error
    except OSError as error:
        full = " (the disk is full)" if error.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise OSError(
            error.errno,
            f"Cannot write the checkpoint {path}{full}: {error.strerror or error}. Nothing was "
            "written under that name; the latest complete checkpoint is kept. Free the space and "
            "run `allennlp train` again with --recover.",
        ) from error
