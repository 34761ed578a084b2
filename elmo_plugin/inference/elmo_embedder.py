"""
`ElmoEmbedder`: the biLM's layers as numpy arrays (AllenNLP 0.9's API, removed in 1.0).
"""
import logging
import os
from typing import IO, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import lazy_groups_of
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin.inference.embed_file import embed_file
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.modules.start_state import BatchStartState
from elmo_plugin.weights import pretrained

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 64


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
    """

    def __init__(
        self,
        options_file: Optional[str] = None,
        weight_file: Optional[str] = None,
        cuda_device: int = -1,
        stateful: bool = False,
        precision: str = ElmoSettings.precision,
    ) -> None:
        settings = ElmoSettings(stateful=stateful, precision=precision)
        options_file, weight_file = pretrained.files_or_default(options_file, weight_file)
        if cuda_device >= 0 and cuda_device >= torch.cuda.device_count():
            raise ConfigurationError(
                f"cuda_device {cuda_device}: this machine has {torch.cuda.device_count()} CUDA "
                f"device(s) for this torch build (torch {torch.__version__}, CUDA "
                f"{torch.version.cuda or 'not built in'}); use -1 for the CPU"
            )
        self.elmo_bilm = ElmoBiLm.from_settings(options_file, weight_file, settings)
        self.elmo_bilm.eval()
        self.cuda_device = cuda_device
        self.elmo_bilm.to(torch.device("cpu" if cuda_device < 0 else f"cuda:{cuda_device}"))

    @property
    def device(self) -> torch.device:
        """Where the biLM is (client code such as flair moves `elmo_bilm` itself)."""
        return next(self.elmo_bilm.parameters()).device

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
        output = self.elmo_bilm(self.elmo_bilm.character_ids(batch).to(self.device))
        layers = [
            remove_sentence_boundaries(layer, output["mask"]) for layer in output["activations"]
        ]
        activations = torch.stack([layer for layer, _ in layers], dim=1)
        return activations, layers[0][1]

    def embed_sentence(self, sentence: List[str]) -> numpy.ndarray:
        """`(num_layers, len(sentence), output_dim)` for one tokenized sentence."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: List[List[str]]) -> List[numpy.ndarray]:
        """One `(num_layers, len(sentence), output_dim)` array per sentence; empty ones give
        `(num_layers, 0, output_dim)`."""
        _check_tokenized(batch)
        if all(len(sentence) == 0 for sentence in batch):
            return [self.empty_embedding() for _ in batch]
        activations, mask = self.batch_to_embeddings(batch)
        lengths = mask.sum(dim=1).tolist()
        activations = activations.cpu().numpy()
        return [activations[row, :, :length] for row, length in enumerate(lengths)]

    def embed_sentences(
        self, sentences: Iterable[List[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[numpy.ndarray]:
        """Lazily embeds an iterable of tokenized sentences, `batch_size` at a time, in order."""
        for batch in lazy_groups_of(iter(sentences), batch_size):
            yield from self.embed_batch(batch)

    def embed_file(
        self,
        input_file: Union[str, os.PathLike, IO],
        output_file_path: str,
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
        **options,
    ) -> None:
        """
        Embeds a file of whitespace-tokenized sentences, one per line, into HDF5; the same code
        path as `allennlp elmo` (see `elmo_plugin.inference.embed_file.embed_file` for the
        further `options`: `resume`, `overwrite`, `allow_empty_lines`, ...).

        # Parameters

        input_file : `Union[str, os.PathLike, IO]`
            The input path, or an open file that has one (`.name`).
        output_file_path : `str`
            The HDF5 file to write; it appears only when complete.
        output_format : `str`, optional (default = `"all"`)
            `"all"` (every layer), `"top"` (the last layer) or `"average"` (their mean).
        batch_size : `int`, optional (default = `64`)
            Sentences per batch.
        forget_sentences : `bool`, optional (default = `False`)
            Do not write the `sentence_to_index` dataset.
        use_sentence_keys : `bool`, optional (default = `False`)
            Key datasets by the sentence instead of its line index.
        """
        input_path: Optional[str] = None
        if isinstance(input_file, (str, os.PathLike)):
            input_path = os.fspath(input_file)
        elif isinstance(getattr(input_file, "name", None), str) and os.path.isfile(input_file.name):
            input_path = input_file.name
        if input_path is None:
            raise ValueError("embed_file needs a path, or an open file with a name on disk")
        embed_file(
            self,
            input_path,
            output_file_path,
            output_format=output_format,
            batch_size=batch_size,
            forget_sentences=forget_sentences,
            use_sentence_keys=use_sentence_keys,
            **options,
        )


def _check_tokenized(batch: List[List[str]]) -> None:
    # A string is a sequence too: "a b" would be read as the tokens "a", " ", "b".
    for sentence in batch:
        if isinstance(sentence, str) or not all(isinstance(token, str) for token in sentence):
            raise TypeError(
                f"ElmoEmbedder takes tokenized sentences, lists of strings (e.g. 'a b'.split()); "
                f"got {sentence!r}"
            )
