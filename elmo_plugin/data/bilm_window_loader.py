"""
The data loader of the biLM's packed windows: its batches are one window per stream of the
`elmo_bilm_corpus` reader, in stream order, so its batch size is the reader's `num_streams`
and cannot be set to anything else.
"""
from typing import Iterator, Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.data_loaders.multiprocess_data_loader import MultiProcessDataLoader
from allennlp.data.dataset_readers.dataset_reader import DatasetReader, DatasetReaderInput
from overrides import overrides

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader


@DataLoader.register("bilm_windows")
class BiLmWindowLoader(MultiProcessDataLoader):
    """
    AllenNLP's `MultiProcessDataLoader` with the settings packed windows need: batches of
    `num_streams` instances taken from the reader, in order, unshuffled (the reader shuffles
    sentences instead). The validation loader, built from the same parameters with the
    validation reader, follows that reader's streams.

    # Parameters

    reader : `DatasetReader`
        An `elmo_bilm_corpus` reader with `window_size` and `num_streams`.
    data_path : `DatasetReaderInput`
        What the reader reads.
    batch_size : `int`, optional
        Leave it out; if given, it must be the reader's `num_streams`.
    shuffle : `bool`, optional (default = `False`)
        Accepted so that configurations written for AllenNLP's loader keep working; `True` is
        refused, since shuffled windows would break the state carried from one to the next.
    num_workers : `int`, optional (default = `0`)
        0 or 1: the windows must reach the model in order.
    max_instances_in_memory : `int`, optional
        See `MultiProcessDataLoader`: the corpus is then read while it is trained on, this many
        windows ahead, and the reader shuffles it again on every pass. The training configs
        set it, since all of a corpus's instances take ~0.5 KB of memory per token. The
        loader's length is then counted before each pass (`BiLmCorpusReader.window_batches`).
    batches_per_epoch : `int`, optional
        See `MultiProcessDataLoader`.
    cuda_device : `torch.device`, optional
        See `MultiProcessDataLoader`.
    quiet : `bool`, optional (default = `False`)
        See `MultiProcessDataLoader`.
    """

    def __init__(
        self,
        reader: DatasetReader,
        data_path: DatasetReaderInput,
        batch_size: Optional[int] = None,
        shuffle: bool = False,
        num_workers: int = 0,
        max_instances_in_memory: Optional[int] = None,
        batches_per_epoch: Optional[int] = None,
        cuda_device: Optional[torch.device] = None,
        quiet: bool = False,
    ) -> None:
        where = f"the data loader of {data_path}"
        if not isinstance(reader, BiLmCorpusReader) or reader.num_streams is None:
            raise ConfigurationError(
                f"{where}: 'bilm_windows' loads the packed windows of an 'elmo_bilm_corpus' reader "
                f"with window_size and num_streams; its reader is {type(reader).__name__}"
                + ("" if not isinstance(reader, BiLmCorpusReader) else " without them")
                + ". For sentence instances use AllenNLP's loader: data_loader.type 'multiprocess'."
            )
        if batch_size not in (None, reader.num_streams):
            raise ConfigurationError(
                f"{where}: batch_size is {batch_size}, but its reader has num_streams "
                f"{reader.num_streams}; every batch is one window per stream. Leave batch_size out "
                "(data_loader, validation_data_loader): it follows the reader's num_streams "
                "(dataset_reader, validation_dataset_reader)."
            )
        if shuffle:
            raise ConfigurationError(
                f"{where}: shuffle is true; packed windows must reach the model in stream order "
                "(the reader shuffles sentences before packing them). Leave shuffle out."
            )
        if num_workers > 1:
            raise ConfigurationError(
                f"{where}: num_workers is {num_workers}; packed windows must reach the model in "
                "stream order, so use 0 or 1."
            )
        super().__init__(
            reader,
            data_path,
            batch_size=reader.num_streams,
            shuffle=False,
            num_workers=num_workers,
            max_instances_in_memory=max_instances_in_memory,
            batches_per_epoch=batches_per_epoch,
            cuda_device=cuda_device,
            quiet=quiet,
        )

    @overrides
    def __len__(self) -> int:
        # AllenNLP's loader knows its length only once every instance is in memory: read
        # lazily, the trainer's bar would show no total and no time left.
        if self.batches_per_epoch is not None or self.max_instances_in_memory is None:
            return super().__len__()
        return self.reader.window_batches(self.data_path)  # type: ignore

    @overrides
    def __iter__(self) -> Iterator[TensorDict]:
        if self.max_instances_in_memory is None:
            yield from super().__iter__()
            return
        # Read lazily, instances arrive while the trainer's bar counts the batches: a second
        # bar for them would print between its updates.
        quiet = self.quiet
        self.quiet = True
        try:
            yield from super().__iter__()
        finally:
            self.quiet = quiet
            if self.num_workers > 0:
                # The worker read the pass with its copy of the reader: count it here, or every
                # pass would be shuffled as the first.
                self.reader.count_pass_read_by_a_worker()  # type: ignore
