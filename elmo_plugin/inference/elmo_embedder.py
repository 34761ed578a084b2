"""
`ElmoEmbedder`: the biLM's layers as numpy arrays (AllenNLP 0.9's API, removed in 1.0).
"""
import logging
import os
from typing import IO, Dict, Iterable, Iterator, List, Optional, Protocol, Tuple, Union

import numpy
import psutil
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import lazy_groups_of

from elmo_plugin.common.overwrite_guard import refuse_writing_over_inputs
from elmo_plugin.inference.batching import rows_within_token_budget
from elmo_plugin.inference.embed_file import embed_file
from elmo_plugin.inference.embed_file_options import DEFAULT_BATCH_SIZE, EmbedFileOptions
from elmo_plugin.inference.output_vectors import LayerMix, OutputVectors
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.segmented_reading import direction_columns
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.modules.start_state import BatchStartState
from elmo_plugin.weights import pretrained

logger = logging.getLogger(__name__)

# Token positions per batch (and per segment of a longer sentence): see BENCHMARKS.md,
# "Batches by token budget", for how throughput and memory vary with it.
DEFAULT_MAX_TOKENS_PER_BATCH = 8192


class EmbeddingWriter(Protocol):
    """Where `ElmoEmbedder.embed_batch_into` puts each sentence's vectors."""

    def whole(self, row: int, embedding: numpy.ndarray) -> None:
        """All of row `row`'s vectors, `(num_layers, num_tokens, output_dim)`."""

    def start_segments(self, row: int, num_tokens: int) -> None:
        """Row `row` (of `num_tokens` tokens) comes in segments."""

    def segment(self, row: int, direction: str, start: int, stop: int, layers: List[torch.Tensor]) -> None:
        """Tokens `start:stop` of row `row`: one direction's half of every layer, each
        `(stop - start, output_dim // 2)` (see `segmented_reading`)."""


class _ArrayWriter:
    """Vectors into numpy arrays, a long sentence's allocated once and filled in place."""

    def __init__(self, arrays: List[numpy.ndarray], embedder: "ElmoEmbedder") -> None:
        self._arrays = arrays
        self._shape = (embedder.num_layers, embedder.output_dim)

    def whole(self, row: int, embedding: numpy.ndarray) -> None:
        self._arrays[row] = embedding

    def start_segments(self, row: int, num_tokens: int) -> None:
        layers, dim = self._shape
        needed = layers * num_tokens * dim * 4
        available = psutil.virtual_memory().available
        if needed > available:
            raise MemoryError(
                f"A sentence of {num_tokens} tokens has {needed / 2**30:.1f} GiB of vectors and "
                f"this machine has {available / 2**30:.1f} GiB available: embed it into a file "
                "(allennlp elmo, ElmoEmbedder.embed_file), which writes them as they are computed."
            )
        self._arrays[row] = numpy.empty((layers, num_tokens, dim), dtype=numpy.float32)

    def segment(self, row: int, direction: str, start: int, stop: int, layers: List[torch.Tensor]) -> None:
        columns = direction_columns(direction, self._shape[1])
        for index, layer in enumerate(layers):
            self._arrays[row][index, start:stop, columns] = layer.cpu().numpy()


class ElmoEmbedder:
    """
    Embeds tokenized sentences with every biLM layer, as numpy arrays of shape
    `(num_layers, num_tokens, 2 * projection_dim)`.

    # Parameters

    options_file : `str`, optional
        Path or URL of the biLM options, or of a model directory or archive.
    weight_file : `str`, optional
        Path or URL of the biLM weights (any format of `elmo_plugin.weights.formats`), or of a
        model directory or archive. With neither file given: the published original ELMo.
    cuda_device : `int`, optional (default = `-1`)
        GPU to run on; -1 for the CPU.
    stateful : `bool`, optional (default = `False`)
        `False`: a sentence's vectors depend only on the sentence (see `ElmoSettings`).
        `True`: AllenNLP 0.9's behaviour, LSTM state carried from batch to batch.
    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"` for faster inference at a measured cost in fidelity (see
        `ElmoSettings`; int8 on the CPU only).
    max_tokens_per_batch : `int`, optional (default = `DEFAULT_MAX_TOKENS_PER_BATCH`)
        The most token positions (with `<S>` and `</S>`, padding included) the LSTMs read at
        once: the file engine fills its batches up to it, and a sentence longer than it is read
        in segments of this many tokens (`ElmoBiLm.read_in_segments`), so memory is bounded by
        it whatever the sentence. Vectors do not depend on it (beyond float rounding).
    """

    def __init__(
        self,
        options_file: Optional[str] = None,
        weight_file: Optional[str] = None,
        cuda_device: int = -1,
        stateful: bool = False,
        precision: str = ElmoSettings.precision,
        max_tokens_per_batch: int = DEFAULT_MAX_TOKENS_PER_BATCH,
    ) -> None:
        if max_tokens_per_batch < 3:
            raise ConfigurationError(
                f"max_tokens_per_batch must be at least 3 (a token and the sentence boundaries), "
                f"got {max_tokens_per_batch}"
            )
        self.max_tokens_per_batch = max_tokens_per_batch
        settings = ElmoSettings(stateful=stateful, precision=precision)
        options_file, weight_file = pretrained.files_or_default(options_file, weight_file)
        self.model_files = (options_file, weight_file)  # as given: no output may write over them
        if cuda_device >= 0 and cuda_device >= torch.cuda.device_count():
            raise ConfigurationError(
                f"cuda_device {cuda_device}: this machine has {torch.cuda.device_count()} CUDA "
                f"device(s) for this torch build (torch {torch.__version__}, CUDA "
                f"{torch.version.cuda or 'not built in'}); use -1 for the CPU"
            )
        self.elmo_bilm = ElmoBiLm.from_settings(options_file, weight_file, settings)
        self.elmo_bilm.eval()
        self.move_to(torch.device("cpu" if cuda_device < 0 else f"cuda:{cuda_device}"))

    @property
    def device(self) -> torch.device:
        """Where the biLM is (client code such as flair moves `elmo_bilm` itself)."""
        return next(self.elmo_bilm.parameters()).device

    def move_to(self, device: torch.device) -> None:
        """Computes on `device` from now on (`embed_file`'s worker processes, each on its GPU)."""
        self.elmo_bilm.to(device)
        self.cuda_device = device.index if device.type == "cuda" else -1

    @property
    def num_layers(self) -> int:
        return self.elmo_bilm.num_layers

    @property
    def output_dim(self) -> int:
        return self.elmo_bilm.get_output_dim()

    @property
    def stateful(self) -> bool:
        return self.elmo_bilm.stateful

    def identity(self) -> Dict[str, str]:
        """What a resumed `embed_file` run must share: the model and how it computes."""
        return {
            "model": self.elmo_bilm.fingerprint(),
            "precision": self.elmo_bilm.precision,
            "device": self.device.type,
        }

    @property
    def batch_start_state(self) -> BatchStartState:
        """The carried LSTM state (stateful mode), for saving and restoring it."""
        return self.elmo_bilm.lstm.batch_start_state

    def empty_embedding(self) -> numpy.ndarray:
        return numpy.zeros((self.num_layers, 0, self.output_dim), dtype=numpy.float32)

    @torch.no_grad()
    def batch_to_embeddings(self, batch: List[List[str]]) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        # Returns

        `activations` of shape `(batch_size, num_layers, timesteps, output_dim)` and the
        `(batch_size, timesteps)` mask, without `<S>` and `</S>`.
        """
        return self._without_boundaries(self.elmo_bilm(self.elmo_bilm.character_ids(batch).to(self.device)))

    @staticmethod
    def _without_boundaries(output: Dict) -> Tuple[torch.Tensor, torch.Tensor]:
        # AllenNLP's `remove_sentence_boundaries`, in two operations on the whole batch rather
        # than a copy per row and layer (on a GPU each is a launch and its lengths a sync).
        mask = output["mask"]  # (batch, 2 + timesteps): <S>, the tokens, </S>, padding
        without = mask[:, 2:]  # (batch, timesteps): as many True per row as it has tokens
        # (batch, layers, timesteps, dim); a row's </S> and padding become zeros.
        activations = torch.stack(output["activations"], dim=1)[:, :, 1:-1]
        return activations.masked_fill(~without[:, None, :, None], 0.0), without

    def embed_sentence(self, sentence: List[str]) -> numpy.ndarray:
        """`(num_layers, len(sentence), output_dim)` for one tokenized sentence."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: List[List[str]]) -> List[numpy.ndarray]:
        """One `(num_layers, len(sentence), output_dim)` array per sentence; empty ones give
        `(num_layers, 0, output_dim)`. A sentence longer than `max_tokens_per_batch` is read in
        segments: only its vectors need its length in memory."""
        arrays: List[numpy.ndarray] = [self.empty_embedding()] * len(batch)
        self.embed_batch_into(batch, _ArrayWriter(arrays, self))
        return arrays

    @torch.no_grad()
    def embed_batch_into(self, batch: List[List[str]], writer: "EmbeddingWriter") -> None:
        """
        Embeds `batch` and hands each sentence's vectors to `writer`: whole, or segment by
        segment for a sentence longer than `max_tokens_per_batch` (the file engine writes
        those straight into the output).
        """
        _check_tokenized(batch)
        token_layer = self.elmo_bilm.token_embedder
        if not any(batch) and not (self.stateful and getattr(token_layer, "empty_sentences_advance_state", False)):
            for row in range(len(batch)):  # nothing to read, and no state to carry
                writer.whole(row, self.empty_embedding())
            return
        groups, long_rows = rows_within_token_budget([len(sentence) for sentence in batch], self.max_tokens_per_batch)
        if not long_rows and len(groups) == 1:  # the whole batch fits the budget: one pass
            activations, mask = self.batch_to_embeddings(batch)
            lengths = mask.sum(dim=1).tolist()
            activations = activations.cpu().numpy()
            for row, length in enumerate(lengths):
                writer.whole(row, activations[row, :, :length])
            return
        # Groups of rows within the budget, long rows one by one in segments, each from its
        # row of the start state (carried or fixed point); the final states go back to their
        # rows for the next batch.
        start_state = self.batch_start_state.for_batch(len(batch), next(self.elmo_bilm.parameters()))
        final_states: List[Optional[Tuple[torch.Tensor, torch.Tensor]]] = [None] * len(batch)
        for group in groups:
            rows = torch.tensor(group, device=start_state[0].device)
            output, final = self.elmo_bilm.forward_with_state(
                self.elmo_bilm.character_ids([batch[row] for row in group]).to(self.device),
                (start_state[0].index_select(1, rows), start_state[1].index_select(1, rows)),
            )
            activations, mask = self._without_boundaries(output)
            lengths = mask.sum(dim=1).tolist()
            activations = activations.cpu().numpy()
            for position, row in enumerate(group):
                writer.whole(row, activations[position, :, : lengths[position]])
                final_states[row] = (final[0][:, position : position + 1], final[1][:, position : position + 1])
        for row in long_rows:
            writer.start_segments(row, len(batch[row]))
            final_states[row] = self.elmo_bilm.read_in_segments(
                batch[row],
                (start_state[0][:, row : row + 1], start_state[1][:, row : row + 1]),
                self.max_tokens_per_batch,
                lambda direction, start, stop, layers, row=row: writer.segment(row, direction, start, stop, layers),
            )
        self.batch_start_state.after_batch(
            tuple(torch.cat([state[part] for state in final_states], dim=1) for part in (0, 1))  # type: ignore
        )

    def embed_sentences(
        self, sentences: Iterable[List[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[numpy.ndarray]:
        """Lazily embeds an iterable of tokenized sentences, `batch_size` at a time, in order."""
        for batch in _batches_of(sentences, batch_size):
            yield from self.embed_batch(batch)

    def embed_batch_sentence_vectors(
        self,
        batch: List[List[str]],
        mode: str = "mean",
        output_format: str = "all",
        mix: Optional[Union[LayerMix, str]] = None,
    ) -> List[numpy.ndarray]:
        """
        One vector per sentence of `batch`: the `mode` (`"mean"` or `"unit-mean"`) over its
        tokens of the layers `output_format` chooses (`(num_layers, output_dim)` for `"all"`,
        `(output_dim,)` otherwise; `"mix"` with `mix`, a `LayerMix` or what `LayerMix.parse`
        reads). `<S>` and `</S>` are never counted; an empty sentence's vector is zeros.
        The same vectors as `allennlp elmo --sentence-vectors`, as float32.
        """
        output = OutputVectors(output_format, mix, sentence_vectors=mode)
        output.check(self.num_layers)
        return [output.of_sentence(layers).astype(numpy.float32) for layers in self.embed_batch(batch)]

    def embed_sentence_vectors(
        self,
        sentences: Iterable[List[str]],
        batch_size: int = DEFAULT_BATCH_SIZE,
        mode: str = "mean",
        output_format: str = "all",
        mix: Optional[Union[LayerMix, str]] = None,
    ) -> Iterator[numpy.ndarray]:
        """Lazily, `embed_batch_sentence_vectors` of `sentences`, `batch_size` at a time, in order."""
        for batch in _batches_of(sentences, batch_size):
            yield from self.embed_batch_sentence_vectors(batch, mode, output_format, mix)

    def embed_file(
        self,
        input_file: Union[str, os.PathLike, IO],
        output_file_path: str,
        output_format: str = "all",
        batch_size: Optional[int] = None,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
        *,
        options: Optional[EmbedFileOptions] = None,
        **more_options,
    ) -> None:
        """
        Embeds a file of whitespace-tokenized sentences, one per line, into HDF5; the same code
        path as `allennlp elmo`. AllenNLP 0.9's signature, plus any field of `EmbedFileOptions`
        by keyword (`resume=True`, `chunk_size=...`), or a whole `options` object.

        # Parameters

        input_file : `Union[str, os.PathLike, IO]`
            The input path, or an open file that has one (`.name`).
        output_file_path : `str`
            The HDF5 file to write; it appears only when complete.
        output_format, batch_size, forget_sentences, use_sentence_keys
            As in `EmbedFileOptions` (and AllenNLP 0.9's `embed_file`).
        options : `EmbedFileOptions`, optional
            All of them at once (the arguments before it must then be left at their defaults).
        """
        input_path: Optional[str] = None
        if isinstance(input_file, (str, os.PathLike)):
            input_path = os.fspath(input_file)
        elif isinstance(getattr(input_file, "name", None), str) and os.path.isfile(input_file.name):
            input_path = input_file.name
        if input_path is None:
            raise ValueError("embed_file needs a path, or an open file with a name on disk")
        if options is not None and (more_options or (output_format, batch_size, forget_sentences,
                                                      use_sentence_keys) != ("all", None, False, False)):
            raise ConfigurationError("embed_file: give the options as an EmbedFileOptions or by keyword, not both")
        if options is None:
            options = EmbedFileOptions(output_format=output_format, batch_size=batch_size,
                                       forget_sentences=forget_sentences, use_sentence_keys=use_sentence_keys,
                                       **more_options)
        refuse_writing_over_inputs("allennlp elmo", [output_file_path], self.model_files)
        embed_file(self, input_path, output_file_path, options)


def _batches_of(sentences: Iterable[List[str]], batch_size: int) -> Iterator[List[List[str]]]:
    if batch_size < 1:
        raise ConfigurationError(f"batch_size must be at least 1, got {batch_size}")
    return lazy_groups_of(iter(sentences), batch_size)


def _check_tokenized(batch: List[List[str]]) -> None:
    # A string is a sequence too: "a b" would be read as the tokens "a", " ", "b".
    for sentence in batch:
        if isinstance(sentence, str) or not all(isinstance(token, str) for token in sentence):
            raise TypeError(
                f"ElmoEmbedder takes tokenized sentences, lists of strings (e.g. 'a b'.split()); "
                f"got {sentence!r}"
            )
