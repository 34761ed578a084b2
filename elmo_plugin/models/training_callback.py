"""
What training an `elmo_bilm` model needs of AllenNLP's trainer beyond its own work: checks of
the data against the model before the first step, and a checkpoint that `--recover` continues
exactly from.
"""
import logging
import os
import random
from collections import deque
from typing import Any, Dict, Optional

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import dump_metrics
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.callbacks.callback import TrainerCallback
from overrides import overrides

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.models.bilm import ElmoBiLmModel

logger = logging.getLogger(__name__)


@TrainerCallback.register("elmo_bilm")
class BiLmTrainingCallback(TrainerCallback):
    """
    `on_start`, before the first training step: the model is an `elmo_bilm`; each data loader
    of packed windows gives batches of one window per stream of its reader, unshuffled, in one
    process (else the first validation, an epoch later, would fail); and the validation data is
    read now, so that a missing file or a bad line stops the run before training rather than
    after an epoch. Errors name the configuration keys.

    In every checkpoint (`state_dict`, saved in AllenNLP's training state): the random number
    generators (Python's, numpy's for the sampled softmax, torch's for dropout), the model's
    `recovery_state` (the LSTM state carried between windows, the metrics' running totals) and
    the sum of the epoch's batch losses so far. `allennlp train --recover` then continues the
    interrupted epoch as if nothing had happened: the remaining batches, and so the final
    metrics, are those of an uninterrupted run.

    AllenNLP's trainer averages `training_loss` over the batches it ran since it started, but
    divides by all the epoch's batches: after a recovery mid-epoch it would report too low a
    loss. The epoch's metrics (`metrics_epoch_N.json`, and `metrics.json` if it is the last)
    get the loss of all its batches instead.
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        # From a checkpoint, applied when the trainer is known (`on_start`).
        self._restored: Optional[Dict[str, Any]] = None
        # The sum of this epoch's batch losses, and whether some of them came from a checkpoint.
        self._epoch_loss = 0.0
        self._epoch_recovered = False

    @overrides
    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        if not isinstance(trainer.model, ElmoBiLmModel):
            raise ConfigurationError(
                f"trainer.callbacks: 'elmo_bilm' is for the elmo_bilm model; this is a "
                f"{type(trainer.model).__name__}."
            )
        trainer.model.trainer_callback_attached = True
        loaders = {"training": trainer.data_loader, "validation": trainer._validation_data_loader}
        for name, loader in loaders.items():
            if loader is not None:
                _check_window_loader(name, loader)
        if self._restored is not None:
            # AllenNLP replays the data loader up to the checkpoint without running the model,
            # so the reader's passes (each shuffled by its own seed) come back by themselves;
            # what the model carried from batch to batch does not.
            trainer.model.restore_recovery_state(self._restored["model"])
            self._epoch_loss = self._restored["epoch_loss"]
            self._epoch_recovered = self._restored["batches_in_epoch"] > 0
        if loaders["validation"] is not None:
            deque(loaders["validation"].iter_instances(), maxlen=0)

    @overrides
    def on_batch(self, trainer, batch_inputs, batch_outputs, batch_metrics, epoch, batch_number,
                 is_training, is_primary=True, batch_grad_norm=None, **kwargs) -> None:
        if is_training:
            self._epoch_loss += batch_metrics["batch_loss"]

    @overrides
    def on_epoch(self, trainer, metrics: Dict[str, Any], epoch: int, is_primary: bool = True,
                 **kwargs) -> None:
        if self._epoch_recovered and "training_loss" in metrics:
            batches = dist_reduce_sum(trainer._batches_in_epoch_completed)
            metrics["training_loss"] = dist_reduce_sum(self._epoch_loss) / batches
            if is_primary and self.serialization_dir:
                dump_metrics(os.path.join(self.serialization_dir, f"metrics_epoch_{epoch}.json"), metrics)
        self._epoch_loss = 0.0
        self._epoch_recovered = False

    @overrides
    def state_dict(self) -> Dict[str, Any]:
        numpy_state = numpy.random.get_state()
        return {
            "python_random": random.getstate(),
            # Plain values: checkpoints are loaded with torch.load(weights_only=True).
            "numpy_random": (numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]),
            "torch_random": torch.get_rng_state(),
            "cuda_random": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            "model": self.trainer.model.recovery_state(),
            "epoch_loss": self._epoch_loss,
            "batches_in_epoch": self.trainer._batches_in_epoch_completed,
        }

    @overrides
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        if not state_dict:
            return
        version, internal_state, gauss_next = state_dict["python_random"]
        random.setstate((version, tuple(internal_state), gauss_next))
        name, keys, *rest = state_dict["numpy_random"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), *rest))
        torch.set_rng_state(state_dict["torch_random"])
        if state_dict["cuda_random"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda_random"])
        self._restored = state_dict


def _reader_of(loader) -> Optional[BiLmCorpusReader]:
    reader = getattr(loader, "reader", None)
    return reader if isinstance(reader, BiLmCorpusReader) else None


def _check_window_loader(name: str, loader) -> None:
    reader = _reader_of(loader)
    if reader is None or reader.num_streams is None:
        return  # sentence instances: batched and shuffled freely
    keys = ("data_loader", "dataset_reader") if name == "training" else (
        "validation_data_loader (or data_loader)", "validation_dataset_reader (or dataset_reader)")
    batch_size = getattr(loader, "batch_size", None)
    if getattr(loader, "batch_sampler", None) is not None or batch_size != reader.num_streams:
        raise ConfigurationError(
            f"The {name} data loader's batch_size is {batch_size}, but its reader has num_streams "
            f"{reader.num_streams}: packed windows arrive one per stream, in stream order. Set "
            f"{keys[0]}.batch_size to {keys[1]}.num_streams, or use the 'bilm_windows' data loader, "
            "whose batch size follows it."
        )
    if getattr(loader, "shuffle", False) or getattr(loader, "num_workers", 0) > 1:
        raise ConfigurationError(
            f"The {name} data loader shuffles or reads in several processes ({keys[0]}.shuffle, "
            f"{keys[0]}.num_workers); packed windows must reach the model in stream order."
        )
