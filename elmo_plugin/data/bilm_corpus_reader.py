"""
Raw text for training a biLM: one sentence per line, whitespace-tokenized, in one file or a
glob of shard files (the 1B Word Benchmark layout that bilm-tf reads).
"""
import glob
import logging
import os
import random
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

import torch
import torch.distributed as dist
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.common.util import is_distributed
from allennlp.data.dataset_readers.dataset_reader import DatasetReader
from allennlp.data.fields import MetadataField, TextField
from allennlp.data.instance import Instance
from allennlp.data.token_indexers import SingleIdTokenIndexer
from allennlp.data.tokenizers import Token, Tokenizer, WhitespaceTokenizer
from overrides import overrides

from elmo_plugin.common.text_files import without_bom
from elmo_plugin.data.character_mapper import ElmoCharacterMapper
from elmo_plugin.data.token_indexer import ElmoTokenCharactersIndexer

logger = logging.getLogger(__name__)

# The namespace of the biLM's softmax vocabulary (see `BiLmVocabulary`).
LM_NAMESPACE = "lm_tokens"
# Field names shared with the `elmo_bilm` model and the vocabulary.
SENTENCE_FIELD = "tokens"
FORWARD_WINDOW_FIELD = "forward_tokens"
BACKWARD_WINDOW_FIELD = "backward_tokens"
METADATA_FIELD = "metadata"
# Token indexer names inside those fields.
CHARACTERS_KEY = "elmo"
TARGETS_KEY = "lm"

_GLOB_CHARACTERS = set("*?[")
_T = TypeVar("_T")


@DatasetReader.register("elmo_bilm_corpus")
class BiLmCorpusReader(DatasetReader):
    """
    Reads text for the `elmo_bilm` model. Every line is a sentence, wrapped in `<S>` and
    `</S>`; blank lines are skipped. `file_path` is a file, a URL or a glob pattern (all
    matching files, in sorted order, or shuffled with `shuffle`).

    Two ways to cut the text, as bilm-tf offers:

    - sentences (`window_size` unset): one instance per sentence, field `tokens`. Every
      sentence starts from a zero LSTM state; the data loader batches and shuffles freely.
    - packed windows (`window_size` and `num_streams` set): bilm-tf's training data.
      `num_streams` streams each concatenate whole sentences (each stream takes the next
      sentence when it runs short), and every step yields one window of `window_size`
      predictions per stream, in stream order: instance `i` of a step continues stream `i`,
      so the model carries the LSTM state from batch to batch (truncated backpropagation
      through time). A sentence longer than a window simply continues in the next window.
      The backward LM reads each stream's text in reverse, as bilm-tf's reversed dataset
      does. At the end of the data, windows get shorter until every stream is used up; no
      token is dropped. This needs the data loader's `batch_size` equal to `num_streams`,
      `shuffle: false` and no worker processes (the model checks the order and says so).

    Fields: `tokens` (sentences) or `forward_tokens` and `backward_tokens` (windows of up to
    `window_size + 1` tokens: the forward LM reads all but the last and predicts all but the
    first; the backward window is stored left to right, and the backward LM reads all but the
    first and predicts all but the last), each indexed with `elmo_characters` (key `elmo`)
    and word ids in the `lm_tokens` namespace (key `lm`); windows also get `metadata`
    (`stream`, `step`).

    # Parameters

    window_size : `int`, optional (default = `None`)
        Predictions per window (bilm-tf's `unroll_steps`, 20 in the published models). Unset:
        sentence instances.
    num_streams : `int`, optional (default = `None`)
        Streams of packed windows; must equal the data loader's batch size (per worker in
        distributed training). Required with `window_size`.
    shuffle : `bool`, optional (default = `False`)
        Shuffle the files and the sentences within each file on every pass, as bilm-tf does
        for training (the data loader cannot shuffle packed windows). The order depends on the
        run's random seed (drawn when the reader is made) and the pass, not on what else drew
        random numbers: `allennlp train --recover` reads a pass again in the same order. (With
        the data loader's default, every instance kept in memory, the data is read once.)
    max_sentence_length : `int`, optional (default = `None`)
        Sentence mode only: skip (and count in a warning) sentences with more words.
    tokenizer : `Tokenizer`, optional (default = `WhitespaceTokenizer()`)
        Splits a line into words; the biLM's corpora are pre-tokenized.
    """

    def __init__(
        self,
        window_size: Optional[int] = None,
        num_streams: Optional[int] = None,
        shuffle: bool = False,
        max_sentence_length: Optional[int] = None,
        tokenizer: Optional[Tokenizer] = None,
        **kwargs,
    ) -> None:
        super().__init__(
            manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs
        )
        if (window_size is None) != (num_streams is None):
            raise ConfigurationError(
                "elmo_bilm_corpus: 'window_size' and 'num_streams' go together (packed "
                f"windows); got window_size={window_size}, num_streams={num_streams}."
            )
        if window_size is not None and (window_size < 1 or num_streams < 1):
            raise ConfigurationError(
                "elmo_bilm_corpus: 'window_size' and 'num_streams' must be positive; got "
                f"{window_size} and {num_streams}."
            )
        if window_size is not None and max_sentence_length is not None:
            raise ConfigurationError(
                "elmo_bilm_corpus: 'max_sentence_length' applies to sentence instances only; "
                "packed windows split long sentences across windows."
            )
        self.window_size = window_size
        self.num_streams = num_streams
        self.shuffle = shuffle
        self._shuffle_seed = random.getrandbits(64)
        # Each pass is shuffled by its own generator, so that replaying the data loader up to a
        # checkpoint (`--recover`) gives the same passes whatever else drew random numbers.
        self._passes_read = 0
        self._counted_pass: Optional[Tuple[Tuple[Any, ...], int]] = None  # (what, batches)
        self.max_sentence_length = max_sentence_length
        self._tokenizer = tokenizer or WhitespaceTokenizer()
        self._token_indexers = {
            CHARACTERS_KEY: ElmoTokenCharactersIndexer(),
            TARGETS_KEY: SingleIdTokenIndexer(namespace=LM_NAMESPACE),
        }

    @overrides
    def _read(self, file_path: str) -> Iterator[Instance]:
        paths = self._resolve_files(file_path)
        pass_index = self._passes_read
        self._passes_read += 1
        sentences = self.shard_iterable(self._sentences(paths, file_path, pass_index))
        if self.window_size is None:
            yield from self._sentence_instances(sentences)
        else:
            worker_info = torch.utils.data.get_worker_info()
            if worker_info is not None and worker_info.num_workers > 1:
                raise ConfigurationError(
                    "elmo_bilm_corpus: packed windows must reach the model in stream order; "
                    "use 'num_workers' 0 or 1 in the data loader."
                )
            yield from self._window_instances(sentences)

    def _resolve_files(self, file_path: str) -> List[str]:
        if _GLOB_CHARACTERS & set(file_path):
            paths = sorted(glob.glob(os.path.expanduser(file_path)))
            if not paths:
                raise ConfigurationError(f"elmo_bilm_corpus: no file matches '{file_path}'.")
            return paths
        try:
            return [cached_path(file_path)]
        except FileNotFoundError as error:
            raise ConfigurationError(f"elmo_bilm_corpus: {file_path} not found.") from error

    def window_batches(self, file_path: str) -> int:
        """
        How many batches of packed windows (steps of `num_streams` windows) the next pass over
        `file_path` yields, in this process's share of the data: the text is read and split
        into words again, without indexing, and packed as `_read` packs it, in the same order.
        Counted once per pass (AllenNLP's trainer and its progress bar both ask), and once in
        all without `shuffle`.
        """
        if self.window_size is None:
            raise ValueError("elmo_bilm_corpus: batches of windows need window_size and num_streams.")
        share = (dist.get_rank(), dist.get_world_size()) if is_distributed() else None
        # Unshuffled (validation), every pass packs alike: counted once, not before every pass.
        pass_order = self._passes_read if self.shuffle else None
        key = (file_path, pass_order, share, self.get_worker_info())
        if self._counted_pass is None or self._counted_pass[0] != key:
            paths = self._resolve_files(file_path)
            sentences = self.shard_iterable(self._sentences(paths, file_path, self._passes_read))
            # Stand-ins for the sentences' tokens with their boundaries: only lengths matter.
            steps = self._packed_windows(range(len(words) + 2) for words in sentences)
            self._counted_pass = (key, sum(1 for _ in steps))
        return self._counted_pass[1]

    def count_pass_read_by_a_worker(self) -> None:
        """Counts a pass that a copy of this reader read in a worker process, so that the next
        pass is shuffled by its own seed (the data loader calls it)."""
        self._passes_read += 1

    def _sentences(self, paths: List[str], file_path: str, pass_index: int) -> Iterator[List[Token]]:
        paths = list(paths)
        shuffler = random.Random(f"{self._shuffle_seed}:{pass_index}")
        if self.shuffle:
            shuffler.shuffle(paths)
        total = 0
        for path in paths:
            lines = self._read_lines(path)
            if self.shuffle:
                shuffler.shuffle(lines)
            for line in lines:
                total += 1
                yield self._tokenizer.tokenize(line)
        if total == 0:
            raise ConfigurationError(
                f"elmo_bilm_corpus: '{file_path}' holds no sentences (files: {', '.join(paths)})."
            )

    @staticmethod
    def _read_lines(path: str) -> List[str]:
        lines = []
        with open(path, "rb") as handle:
            for line_number, raw_line in enumerate(handle, start=1):
                try:
                    line = (without_bom(raw_line) if line_number == 1 else raw_line).decode("utf-8").strip()
                except UnicodeDecodeError as error:
                    raise ConfigurationError(
                        f"elmo_bilm_corpus: {path}, line {line_number} is not valid UTF-8 "
                        f"({error.reason} at byte {error.start})."
                    ) from error
                if line:
                    lines.append(line)
        return lines

    def _sentence_instances(self, sentences: Iterable[List[Token]]) -> Iterator[Instance]:
        skipped = 0
        for words in sentences:
            if self.max_sentence_length is not None and len(words) > self.max_sentence_length:
                skipped += 1
                continue
            yield self.text_to_instance(words)
        if skipped:
            logger.warning(
                "elmo_bilm_corpus: skipped %d sentences longer than max_sentence_length=%d.",
                skipped,
                self.max_sentence_length,
            )

    @overrides(check_signature=False)
    def text_to_instance(self, words: List[Token]) -> Instance:  # type: ignore
        """A sentence instance (`tokens` = `<S>`, the words, `</S>`)."""
        return Instance({SENTENCE_FIELD: TextField(_with_boundaries(words))})

    def _window_instances(self, sentences: Iterable[List[Token]]) -> Iterator[Instance]:
        bounded_sentences = (_with_boundaries(words) for words in sentences)
        for step, windows in enumerate(self._packed_windows(bounded_sentences)):
            for stream, (forward_window, backward_window) in enumerate(windows):
                yield Instance(
                    {
                        FORWARD_WINDOW_FIELD: TextField(forward_window),
                        BACKWARD_WINDOW_FIELD: TextField(backward_window),
                        METADATA_FIELD: MetadataField({"stream": stream, "step": step}),
                    }
                )

    def _packed_windows(self, sentences: Iterable[Sequence[_T]]) -> Iterator[List[Tuple[List[_T], List[_T]]]]:
        """Per step, each stream's (forward window, backward window), from `sentences` with
        their boundary tokens: the one packing of `_read` and `window_batches`."""
        window_tokens = self.window_size + 1
        sentence_iterator = iter(sentences)
        # Per stream, the text not yet read, in each direction's reading order.
        forward_buffers: List[List[_T]] = [[] for _ in range(self.num_streams)]
        backward_buffers: List[List[_T]] = [[] for _ in range(self.num_streams)]
        exhausted = False
        while True:
            for forward_buffer, backward_buffer in zip(forward_buffers, backward_buffers):
                while not exhausted and len(forward_buffer) < window_tokens:
                    sentence = next(sentence_iterator, None)
                    if sentence is None:
                        exhausted = True
                        break
                    forward_buffer.extend(sentence)
                    backward_buffer.extend(reversed(sentence))
            if exhausted and all(len(buffer) < 2 for buffer in forward_buffers):
                return
            windows = []
            for forward_buffer, backward_buffer in zip(forward_buffers, backward_buffers):
                length = min(window_tokens, len(forward_buffer))
                windows.append((forward_buffer[:length], backward_buffer[:length][::-1]))
                # The last token read is the next window's first input.
                del forward_buffer[: max(length - 1, 0)]
                del backward_buffer[: max(length - 1, 0)]
            yield windows

    @overrides
    def apply_token_indexers(self, instance: Instance) -> None:
        for name in (SENTENCE_FIELD, FORWARD_WINDOW_FIELD, BACKWARD_WINDOW_FIELD):
            if name in instance.fields:
                instance.fields[name].token_indexers = self._token_indexers  # type: ignore


def _with_boundaries(words: List[Token]) -> List[Token]:
    return [Token(ElmoCharacterMapper.bos_token), *words, Token(ElmoCharacterMapper.eos_token)]
