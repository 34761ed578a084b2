"""
The pre-trained biLM: token layer + LSTM stack, loaded from its files, returning all of its
layers.
"""
import dataclasses
import hashlib
import itertools
import json
import logging
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.character_mapper import ElmoCharacterMapper
from elmo_plugin.kernels.products import Kernels
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.manylangs_encoder import ElmoForManyLangsEncoder
from elmo_plugin.modules.segmented_reading import SegmentSink, read_in_segments
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.modules.start_state import BetweenSentencesState, LstmState
from elmo_plugin.modules.word_vector_cache import CachedWordVectors, token_vectors
from elmo_plugin.modules.word_encoder import ElmoWordEncoder, word_input_vocabulary
from elmo_plugin.weights.formats import BiLmWeights
from elmo_plugin.weights import layout
from elmo_plugin.weights.recorded import RECORD_KEY, bilm_record, file_names, read_bilm_of_model
from elmo_plugin.weights.options import ELMOFORMANYLANGS_CHARACTERS, ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, copy_into_parameters, with_prefix

logger = logging.getLogger(__name__)


class ElmoBiLm(torch.nn.Module):
    """
    A pre-trained biLM (ELMo): character input (every published model), or word input when
    the options have no `char_cnn` (see `ElmoWordEncoder`). Its forward returns every layer: the
    context-free token layer (duplicated to match the LSTM width) and one per LSTM layer, for
    the input sentences with `<S>` and `</S>` added.

    # Parameters

    options_file : `Union[str, ElmoOptions]`, optional
        Path or URL of the options JSON, or already parsed options; or of a model directory or
        archive that holds the whole biLM (then `weight_file` may be `None`).
    weight_file : `Optional[str]`
        Path or URL of the weights, in any format of `elmo_plugin.weights.formats` (a model
        directory or archive too). Options without weights are refused unless `random_weights`.
    requires_grad, vocab_to_cache, stateful, precision
        See `ElmoSettings`.
    random_weights : `bool`, optional (default = `False`)
        Accept options without weights and leave the parameters randomly initialised: a biLM
        trained from scratch (the biLM model), tests and benchmarks. Never implied: a biLM
        loaded for use without its weights would give meaningless vectors.
    settings : `ElmoSettings`, optional
        `requires_grad`, `vocab_to_cache`, `stateful` and `precision` as one object (what
        `Elmo`, the token embedder and `ElmoEmbedder` pass); instead of those four.
    serialization_dir : `str`, optional
        The directory of the AllenNLP model this biLM is part of (AllenNLP passes it to the
        model's components while training and loading). Where its weights record this biLM,
        it is built from that record instead of from the files, whose weights the model's
        own replace anyway: a trained model loads without its ELMo files (`weights.recorded`).

    A biLM being trained (`elmo_plugin.models.trainable_bilm`) extends this class through
    `_build` and its two hooks.
    """

    def __init__(
        self,
        options_file: Union[str, ElmoOptions, None],
        weight_file: Optional[str],
        requires_grad: bool = ElmoSettings.requires_grad,
        vocab_to_cache: Optional[List[str]] = ElmoSettings.vocab_to_cache,
        stateful: bool = ElmoSettings.stateful,
        precision: str = ElmoSettings.precision,
        random_weights: bool = False,
        *,
        settings: Optional[ElmoSettings] = None,
        serialization_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        if settings is None:
            settings = ElmoSettings(requires_grad, stateful, precision, vocab_to_cache)
        if options_file is None and weight_file is None:
            raise ConfigurationError(
                "ElmoBiLm needs its files: an options file and a weight file, or a model "
                "directory or archive."
            )
        options, weights = read_bilm_of_model(options_file, weight_file, serialization_dir)
        if weights is None and not random_weights:
            raise ConfigurationError(
                f"The ELMo options{'' if isinstance(options_file, ElmoOptions) else ' ' + str(options_file)} "
                "come without weights: name the biLM's weight file too (allennlp elmo --weight-file; weight_file= "
                "in Python and configs), or a model directory or archive that holds both."
            )
        self._build(options, weights, settings)
        self.record_in_state_dict(options_file, weight_file)

    @classmethod
    def from_weights(cls, options: ElmoOptions, weights: BiLmWeights, settings: ElmoSettings = ElmoSettings()) -> "ElmoBiLm":
        """A biLM from weights already read (`read_bilm_weights`), run as `settings` say."""
        if weights is None:
            raise ConfigurationError("ElmoBiLm.from_weights needs weights (random ones: ElmoBiLm(..., random_weights=True)).")
        bilm = cls.__new__(cls)
        torch.nn.Module.__init__(bilm)
        bilm._build(options, weights, settings)
        return bilm

    # What a biLM being trained changes (`models/trainable_bilm.py`).

    def _words_to_train(self) -> Optional[List[str]]:
        """A word-input biLM's words when no weight file gives them (training from scratch)."""
        return None

    def _before_loading_weights(self, lstm: ElmoLstm) -> None:
        """Adjusts the LSTM stack before the file's weights are loaded into it."""

    def _build(self, options: ElmoOptions, weights: Optional[BiLmWeights], settings: ElmoSettings) -> None:
        """The blocks of the biLM `options` describe, with `weights` loaded where given."""
        requires_grad = settings.requires_grad
        self._requires_grad = requires_grad
        if options.softmax_in_weights:  # a trained softmax is not part of the biLM
            options = dataclasses.replace(options, softmax_in_weights=False)
        # One `Kernels` for every block: the one owner of the products' precision.
        self.kernels = Kernels()
        self._token_embedder: Union[ElmoCharacterEncoder, ElmoWordEncoder]
        if options.word_inputs:
            options, words = word_input_vocabulary(
                options, weights and weights.arrays, self._words_to_train(), weights.source if weights else ""
            )
            self._token_embedder = ElmoWordEncoder(words, options.projection_dim, requires_grad)
        elif options.characters == ELMOFORMANYLANGS_CHARACTERS:
            if weights is None:
                raise ConfigurationError(
                    "An ELMoForManyLangs biLM needs its weight file, which holds its vocabularies."
                )
            self._token_embedder = ElmoForManyLangsEncoder(
                options,
                [str(character) for character in weights.arrays[layout.CHAR_VOCABULARY]],
                [str(word) for word in weights.arrays[layout.WORD_VOCABULARY]] if options.word_dim else None,
                requires_grad=requires_grad,
                kernels=self.kernels,
            )
        else:
            self._token_embedder = ElmoCharacterEncoder(
                options, requires_grad=requires_grad, kernels=self.kernels
            )
        self.options = options
        # AllenNLP's attribute names (`_ElmoBiLm._elmo_lstm`, `_token_embedder`): code written
        # for AllenNLP reaches the state through them (`elmo._elmo_lstm._elmo_lstm.reset_states()`).
        self._elmo_lstm = ElmoLstm.from_options(options, requires_grad=requires_grad, kernels=self.kernels)
        self._before_loading_weights(self._elmo_lstm)
        if weights is not None and weights.holds_parameters:
            self.load_arrays(weights.arrays)
        self.num_layers = options.n_layers + 1
        start_state = self._elmo_lstm.batch_start_state
        start_state.stateful = settings.stateful
        start_state.fixed_point = BetweenSentencesState(
            self._read_empty_sentence, self._zero_start_state, self._start_state_parameters, self.kernels
        )
        self._word_embedding: Optional[CachedWordVectors] = None
        self._warned_about_word_ids = False
        if settings.vocab_to_cache:
            if requires_grad:
                logger.warning(
                    "Fine-tuning ELMo with vocab_to_cache: the cached word vectors are trained "
                    "separately from the char CNN, which unknown words still use."
                )
            self.create_cached_cnn_embeddings(list(settings.vocab_to_cache))
            if weights is not None and "cached_word_boundaries" in weights.extras:
                self._word_embedding.boundary_vectors = weights.extras["cached_word_boundaries"]
        self.set_precision(settings.precision)

    @classmethod
    def from_settings(
        cls,
        options_file: Union[str, ElmoOptions],
        weight_file: Optional[str],
        settings: ElmoSettings,
        serialization_dir: Optional[str] = None,
    ) -> "ElmoBiLm":
        """A biLM from its files (or from what the model in `serialization_dir` recorded of
        it), run as `settings` say."""
        return cls(options_file, weight_file, settings=settings, serialization_dir=serialization_dir)

    def record_in_state_dict(self, options_file: Union[str, ElmoOptions, None], weight_file: Optional[str]) -> None:
        """
        From now on `state_dict()` records, in this module's entry of its metadata, that this
        biLM was read from these files, with what a model needs to build it again without them
        (`weights.recorded`). Nothing is recorded for a biLM read from no file.
        """
        files = file_names(options_file, weight_file)
        if any(files):
            self._recorded_files = files
            self.register_state_dict_post_hook(_record_bilm)

    @property
    def token_embedder(self) -> Union[ElmoCharacterEncoder, ElmoWordEncoder]:
        """The context-free token layer: the char CNN, or a word-input biLM's embedding."""
        return self._token_embedder

    @property
    def lstm(self) -> ElmoLstm:
        return self._elmo_lstm

    @property
    def vocabulary(self) -> Optional[List[str]]:
        """A word-input biLM's words in id order; `None` for a character-input biLM."""
        return getattr(self._token_embedder, "vocabulary", None)

    def get_output_dim(self) -> int:
        return self.options.output_dim

    # Settings that can change after construction.

    @property
    def precision(self) -> str:
        return self.kernels.precision

    def set_precision(self, precision: str) -> None:
        """
        Computes the matrix products of `forward` in `precision` from now on (`"float32"`,
        `"bfloat16"`, `"int8"`), from the current weights. Inference only.
        """
        device = next(self.parameters()).device
        self.kernels.set_precision(precision, self._requires_grad, device)

    @property
    def stateful(self) -> bool:
        """Whether the LSTM state is carried from batch to batch (see `ElmoSettings`)."""
        return self._elmo_lstm.batch_start_state.stateful

    @stateful.setter
    def stateful(self, stateful: bool) -> None:
        self._elmo_lstm.batch_start_state.stateful = stateful

    def reset_states(self) -> None:
        """Forgets the carried state (stateful mode): the next batch starts from zeros."""
        self._elmo_lstm.reset_states()

    # Weights: the blocks map their own parameters to the layout (`parameter_mapping`).

    def load_arrays(self, arrays: Arrays) -> None:
        """Sets every parameter of the token layer and the LSTM stack from layout arrays."""
        for block in (self._token_embedder, self._elmo_lstm):
            copy_into_parameters(block, block.parameters_from_arrays(arrays))

    def parameters_from_arrays(self, arrays: Arrays) -> Arrays:
        """The biLM's parameters (token layer and LSTM stack) from layout arrays."""
        return {
            **with_prefix("_token_embedder", self._token_embedder.parameters_from_arrays(arrays)),
            **with_prefix("_elmo_lstm", self._elmo_lstm.parameters_from_arrays(arrays)),
        }

    def weight_arrays(self) -> Dict[str, numpy.ndarray]:
        """The parameters as the datasets of the weight layout (see `layout`)."""
        return {**self._token_embedder.arrays_from_parameters(), **self._elmo_lstm.arrays_from_parameters()}

    def fingerprint(self) -> str:
        """
        A digest of the biLM: its options and every weight and vocabulary entry, whatever file
        or format they came from (the same model read from a zip or from its files has one).
        """
        digest = hashlib.sha256(json.dumps(self.options.to_dict(), sort_keys=True).encode())
        for name, array in sorted(self.weight_arrays().items()):
            digest.update(name.encode())
            if array.dtype == object:
                digest.update("\n".join(map(str, array)).encode())
            else:
                digest.update(numpy.ascontiguousarray(array, dtype=numpy.float32).tobytes())
        return digest.hexdigest()

    # The deterministic start state (`elmo_plugin.modules.start_state`).

    def start_state(self) -> LstmState:
        """
        The state every sentence starts from in deterministic (`stateful=False`) mode, of
        shapes `(n_layers, 1, 2 * projection_dim)` and `(n_layers, 1, 2 * cell_dim)`:
        the fixed point of reading `<S> </S>` repeatedly. Recomputed when parameters change.
        """
        return self._elmo_lstm.batch_start_state.fixed_point()

    def _read_empty_sentence(self, state: LstmState) -> LstmState:
        reference = next(self._token_embedder.parameters())
        empty_sentence = torch.zeros(1, 0, ElmoCharacterMapper.max_word_length, dtype=torch.long)
        encoded = self._token_embedder(empty_sentence.to(reference.device))
        _, final_state = self._elmo_lstm.forward_with_state(encoded["token_embedding"], encoded["mask"], state)
        return final_state

    def _zero_start_state(self) -> LstmState:
        return self._elmo_lstm.zero_state(1, next(self._token_embedder.parameters()))

    def _start_state_parameters(self) -> Iterator[torch.nn.Parameter]:
        return itertools.chain(self._elmo_lstm.parameters(), self._token_embedder.parameters())

    # Context-free vectors and the word-id cache (`elmo_plugin.modules.word_vector_cache`).

    def token_vectors(self, tokens: Sequence[str]) -> torch.Tensor:
        """
        The context-free (token layer) vector of every token, `(len(tokens), projection_dim)`:
        layer 0 of `forward` for that token, in any context (bilm-tf's token embeddings).
        """
        return token_vectors(self._token_embedder, list(tokens))

    def create_cached_cnn_embeddings(self, tokens: List[str]) -> None:
        """Computes the token-layer vector of every token in `tokens` for word-id input."""
        self._word_embedding = CachedWordVectors(self._token_embedder, tokens, trainable=self._requires_grad)

    def character_ids(self, batch: List[List[str]]) -> torch.Tensor:
        """Character ids of tokenized sentences for `forward`: `batch_to_ids`, or wider ids
        where the token layer reads whole tokens (ELMoForManyLangs)."""
        return self._token_embedder.character_ids(batch)

    def embed_character_ids(self, character_ids: torch.Tensor) -> torch.Tensor:
        """
        Context-free token representations `(batch_size, timesteps, projection_dim)` for
        character ids `(batch_size, timesteps, 50)`, without adding `<S>` and `</S>` (a biLM
        in training reads them from its data, where they also occur inside windows of text).
        """
        batch_size, timesteps, characters_per_token = character_ids.size()
        embedded = self._token_embedder.embed_tokens(character_ids.reshape(-1, characters_per_token))
        return embedded.view(batch_size, timesteps, -1)

    def forward(
        self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None
    ) -> Dict[str, Union[torch.Tensor, List[torch.Tensor]]]:
        """
        # Parameters

        inputs : `torch.Tensor`
            Character ids `(batch_size, timesteps, 50)` from `batch_to_ids` or the
            `elmo_characters` indexer.
        word_inputs : `torch.Tensor`, optional
            Word ids `(batch_size, timesteps)` into `vocab_to_cache`; used when it was given.

        # Returns

        `{"activations": [num_layers tensors of shape (batch_size, timesteps + 2,
        2 * projection_dim)], "mask": (batch_size, timesteps + 2) bool}`.
        """
        # (batch_size, timesteps + 2, projection_dim), (batch_size, timesteps + 2)
        token_representation, mask = self._embed_tokens(inputs, word_inputs)
        # (n_layers, batch_size, timesteps + 2, 2 * projection_dim)
        lstm_outputs = self._elmo_lstm(token_representation, mask)
        activations = [
            torch.cat([token_representation, token_representation], dim=-1) * mask.unsqueeze(-1)
        ]
        activations.extend(lstm_outputs.unbind(0))
        return {"activations": activations, "mask": mask}

    def forward_with_state(
        self, inputs: torch.Tensor, initial_state: LstmState
    ) -> Tuple[Dict[str, Union[torch.Tensor, List[torch.Tensor]]], LstmState]:
        """`forward` from `initial_state` (see `ElmoLstm.forward_with_state`), leaving the
        carried state alone; also returns the final state."""
        token_representation, mask = self._embed_tokens(inputs, None)
        lstm_outputs, final_state = self._elmo_lstm.forward_with_state(token_representation, mask, initial_state)
        activations = [
            torch.cat([token_representation, token_representation], dim=-1) * mask.unsqueeze(-1)
        ]
        activations.extend(lstm_outputs.unbind(0))
        return {"activations": activations, "mask": mask}, final_state

    def read_in_segments(
        self, tokens: List[str], initial_state: LstmState, segment_tokens: int, sink: SegmentSink
    ) -> LstmState:
        """One sentence read `segment_tokens` positions at a time, its layers given to `sink`
        segment by segment: memory bounded by the segment (see `segmented_reading`)."""
        return read_in_segments(self, tokens, initial_state, segment_tokens, sink)

    def _embed_tokens(
        self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.BoolTensor]:
        if self._word_embedding is not None and word_inputs is not None:
            if word_inputs.numel() == 0 or word_inputs.max() < self._word_embedding.num_embeddings:
                return self._word_embedding.embed_sentences(word_inputs)
            if not self._warned_about_word_ids:
                logger.warning(
                    "Word ids beyond the cached vocabulary (%d words); using characters instead.",
                    self._word_embedding.num_embeddings,
                )
                self._warned_about_word_ids = True
        encoded = self._token_embedder(inputs)
        return encoded["token_embedding"], encoded["mask"]


def _record_bilm(module: ElmoBiLm, state_dict: Dict[str, torch.Tensor], prefix: str, local_metadata: Dict) -> None:
    """The state-dict hook of `ElmoBiLm.record_in_state_dict`."""
    cache = module._word_embedding
    local_metadata[RECORD_KEY] = bilm_record(
        module.options,
        module._recorded_files,
        module.token_embedder.vocabularies(),
        None if cache is None else cache.boundary_vectors,
    )
