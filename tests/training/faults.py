"""
Fault injection for the recovery tests: a trainer callback, `inject_fault`, that does nothing
unless the environment variable `TRAINING_FAULT` names a fault, so that the faulty run and the
one that recovers share one config (`--recover` refuses another). `TRAINING_FAULT` is
`KIND:EPOCH:BATCH`: after that training batch (counted in its epoch from 1), and before that
batch's checkpoint is written,

- `kill`: the process kills itself (SIGKILL: nothing is cleaned up);
- `kill_in_checkpoint`: the next checkpoint file written gets half its bytes, then SIGKILL;
- `full_disk_in_checkpoint`: checkpoint files cannot grow past 4 KiB (a file-size limit, as
  on a full disk).
"""
import io
import os
import resource
import signal

import torch
from allennlp.training.callbacks.callback import TrainerCallback
from overrides import overrides

TRAINING_FAULT = "TRAINING_FAULT"


@TrainerCallback.register("inject_fault")
class InjectFault(TrainerCallback):
    @overrides
    def on_batch(self, trainer, batch_inputs, batch_outputs, batch_metrics, epoch, batch_number,
                 is_training, is_primary=True, batch_grad_norm=None, **kwargs) -> None:
        fault = os.environ.get(TRAINING_FAULT)
        if not is_training or not fault:
            return
        kind, fault_epoch, fault_batch = fault.split(":")
        if (epoch, batch_number) != (int(fault_epoch), int(fault_batch)):
            return
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        torch.save = {"kill_in_checkpoint": _save_half_then_die,
                      "full_disk_in_checkpoint": _save_on_a_full_disk}[kind]


_torch_save = torch.save


def _save_half_then_die(value, file, *args, **kwargs) -> None:
    buffer = io.BytesIO()
    _torch_save(value, buffer, *args, **kwargs)
    content = buffer.getvalue()
    file.write(content[: len(content) // 2])
    file.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _save_on_a_full_disk(value, file, *args, **kwargs) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write instead of a signal
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        _torch_save(value, file, *args, **kwargs)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
