"""
The pre-trained biLM: character encoder + LSTM stack, loaded from an options JSON and an HDF5
weight file, returning all of its layers.
"""
import dataclasses
import logging
from typing import Dict, List, Optional, Tuple, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.nn.util import add_sentence_boundary_token_ids

from elmo_plugin.data.character_mapper import ElmoCharacterMapper, batch_to_ids
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.modules.elmo_lstm import ElmoLstm, LstmState
from elmo_plugin.modules.reduced_precision import FLOAT32, check_precision
from elmo_plugin.modules.word_encoder import ElmoWordEncoder
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions

logger = logging.getLogger(__name__)

# The deterministic start state is a fixed point of reading empty sentences ("<S> </S>");
# these bound the iteration that finds it (it converges in 10-30 steps on trained models).
_FIXED_POINT_TOLERANCE = 1e-6
_FIXED_POINT_MAX_ITERATIONS = 200
# Tokens per chunk when the char CNN embeds a vocabulary for `vocab_to_cache`.
_VOCABULARY_CHUNK_SIZE = 1024


class ElmoBiLm(torch.nn.Module):
    """
    A pre-trained biLM (ELMo): character input (every published model), or word input when
    the options have no `char_cnn` (see `ElmoWordEncoder`). Its forward returns every layer: the
    context-free token layer (duplicated to match the LSTM width) and one per LSTM layer, for
    the input sentences with `<S>` and `</S>` added.

    # Parameters

    options_file : `Union[str, ElmoOptions]`
        Path or URL of the options JSON, or already parsed options.
    weight_file : `Optional[str]`
        Path or URL of the HDF5 weights in the published layout (see
        `elmo_plugin.weights.layout`); `None` leaves the parameters randomly initialised
        (to train a biLM from scratch).
    requires_grad : `bool`, optional (default = `False`)
        Whether the biLM's parameters are trained.
    vocab_to_cache : `List[str]`, optional (default = `None`)
        A vocabulary whose char-CNN vectors are computed once, so that `forward` can take word
        ids (`word_inputs`) instead of running the char CNN. Index 0 must be padding; ids
        outside the vocabulary fall back to the character input.
    stateful : `bool`, optional (default = `True`)
        `True` (AllenNLP's behaviour): the LSTM state at the end of a batch is carried into
        the next batch, row by row, so a sentence's vectors depend on what came before it.
        `False`: every sentence starts from the same state, so its vectors depend only on the
        sentence itself. That state is the fixed point of reading empty sentences
        (`<S> </S>`) with carried state, i.e. the model's own "between sentences" state,
        which is closer to the carried-state vectors than a zero state (BENCHMARKS.md).
    bias_as_in_file : `bool`, optional (default = `False`)
        Keep the LSTM gate biases as the weight file stores them (see `TfForgetBias`), so
        that a biLM trained with this module exports bit-exactly. The biLM model sets it.
    lstm_input_dropout : `float`, optional (default = `0.0`)
        Dropout on every LSTM layer's input in training mode (see `ElmoLstm`); the biLM
        model's regularisation while training, not used by downstream ELMo.
    vocabulary : `List[str]`, optional (default = `None`)
        A word-input biLM's words in id order, to train one from scratch; a word-input weight
        file holds its own (and if both are given they must agree).
    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"`: the LSTM, highway and projection products in reduced
        precision, for faster inference at a small cost in fidelity (see
        `elmo_plugin.modules.reduced_precision` and BENCHMARKS.md); not with `requires_grad`.
    """

    def __init__(
        self,
        options_file: Union[str, ElmoOptions],
        weight_file: Optional[str],
        requires_grad: bool = False,
        vocab_to_cache: Optional[List[str]] = None,
        stateful: bool = True,
        bias_as_in_file: bool = False,
        lstm_input_dropout: float = 0.0,
        vocabulary: Optional[List[str]] = None,
        precision: str = FLOAT32,
    ) -> None:
        super().__init__()
        check_precision(precision, requires_grad)
        self.precision = FLOAT32
        if isinstance(options_file, ElmoOptions):
            options = options_file
        else:
            options = ElmoOptions.from_file(options_file)
        arrays = None
        self.vocabulary: Optional[List[str]] = None
        self._token_embedder: Union[ElmoCharacterEncoder, ElmoWordEncoder]
        if options.word_inputs:
            options, arrays, self.vocabulary = self._word_input_setup(options, weight_file, vocabulary)
            self._token_embedder = ElmoWordEncoder(
                self.vocabulary, options.projection_dim, requires_grad=requires_grad
            )
        else:
            self._token_embedder = ElmoCharacterEncoder(options, requires_grad=requires_grad)
        self.options = options
        self.stateful = stateful
        self._requires_grad = requires_grad
        self._elmo_lstm = ElmoLstm(
            input_size=options.projection_dim,
            hidden_size=options.projection_dim,
            cell_size=options.cell_dim,
            num_layers=options.n_layers,
            requires_grad=requires_grad,
            memory_cell_clip_value=options.cell_clip,
            state_projection_clip_value=options.proj_clip,
            use_skip_connections=options.use_skip_connections,
            input_dropout_probability=lstm_input_dropout,
        )
        self._bias_as_in_file = bias_as_in_file
        if bias_as_in_file:
            self._elmo_lstm.store_biases_as_in_file()
        if arrays is not None:
            self._load_arrays(arrays)
        elif weight_file is not None:
            self.load_weight_file(weight_file)
        self.num_layers = options.n_layers + 1
        self._carried_state: Optional[LstmState] = None
        self._start_state: Optional[LstmState] = None
        self._start_state_versions: Optional[Tuple[int, ...]] = None
        self._word_embedding: Optional[torch.nn.Embedding] = None
        self._warned_about_word_ids = False
        if vocab_to_cache:
            if requires_grad:
                logger.warning(
                    "Fine-tuning ELMo with vocab_to_cache: the cached word vectors are trained "
                    "separately from the char CNN, which unknown words still use."
                )
            self.create_cached_cnn_embeddings(vocab_to_cache)
        self.set_precision(precision)

    def set_precision(self, precision: str) -> None:
        """
        Computes the matrix products of `forward` in `precision` from now on (`"float32"`,
        `"bfloat16"`, `"int8"`), from the current weights. Inference only.
        """
        check_precision(precision, self._requires_grad)
        self._token_embedder.set_precision(precision)
        self._elmo_lstm.set_precision(precision)
        self.precision = precision

    def _apply(self, fn, *args, **kwargs):  # type: ignore
        # .to(), .cuda(), .double(): reduced-precision copies follow the parameters.
        result = super()._apply(fn, *args, **kwargs)
        if getattr(self, "precision", FLOAT32) != FLOAT32:
            self.set_precision(self.precision)
        return result

    def load_weight_file(self, weight_file: str) -> None:
        """Loads parameters from a published-layout HDF5 file (checked against the options)."""
        arrays = layout.read_weight_file(weight_file, self.options)
        if self.vocabulary is not None:
            self._agreeing_vocabulary(self.vocabulary, arrays, weight_file)
        self._load_arrays(arrays)

    def _load_arrays(self, arrays: Dict[str, numpy.ndarray]) -> None:
        state = layout.to_state_dict(arrays, self.options, bias_as_in_file=self._bias_as_in_file)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                parameter.copy_(state[name])
        if getattr(self, "precision", FLOAT32) != FLOAT32:
            self.set_precision(self.precision)

    @classmethod
    def _word_input_setup(
        cls, options: ElmoOptions, weight_file: Optional[str], vocabulary: Optional[List[str]]
    ) -> Tuple[ElmoOptions, Optional[Dict[str, numpy.ndarray]], List[str]]:
        """A word-input biLM's options (with its size), weight arrays (if a file) and words."""
        arrays = None
        if weight_file is not None:
            if options.n_tokens_vocab is None:
                raise ConfigurationError(
                    f"The options of the word-input biLM {weight_file} lack 'n_tokens_vocab'."
                )
            arrays = layout.read_weight_file(weight_file, options)
            vocabulary = cls._agreeing_vocabulary(vocabulary, arrays, weight_file)
        if vocabulary is None:
            raise ConfigurationError(
                "A word-input biLM (options without 'char_cnn') needs its vocabulary: a "
                "weight file that holds one, or the 'vocabulary' argument."
            )
        if options.n_tokens_vocab not in (None, len(vocabulary)):
            raise ConfigurationError(
                f"The options give n_tokens_vocab {options.n_tokens_vocab}, but the "
                f"vocabulary has {len(vocabulary)} words."
            )
        return dataclasses.replace(options, n_tokens_vocab=len(vocabulary)), arrays, list(vocabulary)

    @staticmethod
    def _agreeing_vocabulary(
        vocabulary: Optional[List[str]], arrays: Dict[str, numpy.ndarray], weight_file: str
    ) -> List[str]:
        in_file = [str(word) for word in arrays[layout.VOCABULARY]]
        if vocabulary is not None and list(vocabulary) != in_file:
            differing = next(
                (i for i, (a, b) in enumerate(zip(vocabulary, in_file)) if a != b),
                min(len(vocabulary), len(in_file)),
            )
            raise ConfigurationError(
                f"The vocabulary of the word-input biLM {weight_file} ({len(in_file)} words) differs "
                f"from the one given ({len(vocabulary)} words) first at id {differing}; train or "
                "fine-tune it with the vocabulary exported next to it (vocab.txt)."
            )
        return in_file

    def weight_arrays(self) -> Dict[str, numpy.ndarray]:
        """The parameters as the datasets of the published weight file (see `layout`)."""
        arrays = layout.from_state_dict(dict(self.named_parameters()), self.options)
        if self.vocabulary is not None:
            arrays[layout.VOCABULARY] = numpy.array(self.vocabulary, dtype=object)
        return arrays

    @property
    def token_embedder(self) -> Union[ElmoCharacterEncoder, ElmoWordEncoder]:
        """The context-free token layer: the char CNN, or a word-input biLM's embedding."""
        return self._token_embedder

    def get_output_dim(self) -> int:
        return self.options.output_dim

    @property
    def lstm(self) -> ElmoLstm:
        return self._elmo_lstm

    def embed_character_ids(self, character_ids: torch.Tensor) -> torch.Tensor:
        """
        Context-free token representations `(batch_size, timesteps, projection_dim)` for
        character ids `(batch_size, timesteps, 50)`, without adding `<S>` and `</S>` (a biLM
        in training reads them from its data, where they also occur inside windows of text).
        """
        batch_size, timesteps, characters_per_token = character_ids.size()
        embedded = self._token_embedder.embed_tokens(character_ids.reshape(-1, characters_per_token))
        return embedded.view(batch_size, timesteps, -1)

    def reset_states(self) -> None:
        """Forgets the carried state (stateful mode): the next batch starts from zeros."""
        self._carried_state = None

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
        token_representation, mask = self._embed_tokens(inputs, word_inputs)
        batch_size = mask.size(0)
        lstm_outputs, final_state = self._elmo_lstm(
            token_representation, mask, self._initial_state(batch_size, token_representation)
        )
        if self.stateful:
            self._carry(final_state)
        activations = [
            torch.cat([token_representation, token_representation], dim=-1) * mask.unsqueeze(-1)
        ]
        activations.extend(lstm_outputs.unbind(0))
        return {"activations": activations, "mask": mask}

    def _embed_tokens(
        self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.BoolTensor]:
        if self._word_embedding is not None and word_inputs is not None:
            if word_inputs.numel() == 0 or word_inputs.max() < self._word_embedding.num_embeddings:
                word_mask = word_inputs > 0
                token_representation, _ = add_sentence_boundary_token_ids(
                    self._word_embedding(word_inputs),
                    word_mask,
                    self._bos_embedding,
                    self._eos_embedding,
                )
                # The mask comes from the ids; AllenNLP derives it from the vectors' signs,
                # which would drop a word whose vector happens to have no positive entry.
                _, mask = add_sentence_boundary_token_ids(word_mask.long(), word_mask, 1, 1)
                return token_representation, mask
            if not self._warned_about_word_ids:
                logger.warning(
                    "Word ids beyond the cached vocabulary (%d words); using characters instead.",
                    self._word_embedding.num_embeddings,
                )
                self._warned_about_word_ids = True
        encoded = self._token_embedder(inputs)
        return encoded["token_embedding"], encoded["mask"]

    def _initial_state(self, batch_size: int, reference: torch.Tensor) -> LstmState:
        if not self.stateful:
            start_state, start_memory = self.start_state()
            return (
                start_state.to(reference.dtype).expand(-1, batch_size, -1),
                start_memory.to(reference.dtype).expand(-1, batch_size, -1),
            )
        zero_state = self._elmo_lstm.zero_state(batch_size, reference)
        if self._carried_state is None:
            return zero_state
        # AllenNLP's rows: row i continues row i of earlier batches; rows never seen start at 0.
        carried_rows = self._carried_state[0].size(1)
        return tuple(  # type: ignore
            torch.cat([carried.to(zero), zero[:, carried_rows:]], dim=1)[:, :batch_size]
            for carried, zero in zip(self._carried_state, zero_state)
        )

    def _carry(self, final_state: LstmState) -> None:
        final_state = (final_state[0].detach(), final_state[1].detach())
        if self._carried_state is None or self._carried_state[0].size(1) <= final_state[0].size(1):
            self._carried_state = final_state
        else:
            # Rows beyond this batch keep their state for a later, larger batch.
            batch_size = final_state[0].size(1)
            self._carried_state = tuple(  # type: ignore
                torch.cat([new.to(old), old[:, batch_size:]], dim=1)
                for new, old in zip(final_state, self._carried_state)
            )

    def start_state(self) -> LstmState:
        """
        The state every sentence starts from in deterministic (`stateful=False`) mode, of
        shapes `(n_layers, 1, 2 * projection_dim)` and `(n_layers, 1, 2 * cell_dim)`:
        the fixed point of reading `<S> </S>` repeatedly. Recomputed when parameters change.
        """
        versions = tuple(parameter._version for parameter in self._elmo_lstm.parameters())
        versions += tuple(parameter._version for parameter in self._token_embedder.parameters())
        if self._start_state is None or versions != self._start_state_versions:
            self._start_state = self._compute_start_state()
            self._start_state_versions = versions
        return self._start_state

    @torch.no_grad()
    def _compute_start_state(self) -> LstmState:
        # Always the float32 fixed point: in reduced precision the iteration need not converge
        # (rounding keeps it moving), and the start state should not depend on the precision.
        precision = self.precision
        if precision == FLOAT32:
            return self._iterate_to_start_state()
        self._token_embedder.set_precision(FLOAT32)
        self._elmo_lstm.set_precision(FLOAT32)
        try:
            return self._iterate_to_start_state()
        finally:
            self._token_embedder.set_precision(precision)
            self._elmo_lstm.set_precision(precision)

    def _iterate_to_start_state(self) -> LstmState:
        reference = next(self._token_embedder.parameters())
        empty_sentence = torch.zeros(1, 0, ElmoCharacterMapper.max_word_length, dtype=torch.long)
        encoded = self._token_embedder(empty_sentence.to(reference.device))
        state = self._elmo_lstm.zero_state(1, reference)
        for _ in range(_FIXED_POINT_MAX_ITERATIONS):
            _, next_state = self._elmo_lstm(encoded["token_embedding"], encoded["mask"], state)
            change = max((new - old).abs().max().item() for new, old in zip(next_state, state))
            state = next_state
            if change < _FIXED_POINT_TOLERANCE:
                break
        else:
            logger.warning(
                "The biLM's between-sentence state did not converge in %d steps (last change "
                "%.2g); deterministic mode starts from the last iterate.",
                _FIXED_POINT_MAX_ITERATIONS,
                change,
            )
        return state

    @torch.no_grad()
    def token_vectors(self, tokens: List[str]) -> torch.Tensor:
        """
        The context-free (char CNN) vector of every token, `(len(tokens), projection_dim)`:
        layer 0 of `forward` for that token, in any context (bilm-tf's token embeddings).
        """
        reference = next(self._token_embedder.parameters())
        vectors = [reference.new_zeros(0, self.options.projection_dim)]
        for start in range(0, len(tokens), _VOCABULARY_CHUNK_SIZE):
            chunk = list(tokens[start : start + _VOCABULARY_CHUNK_SIZE])
            character_ids = batch_to_ids([chunk])[0].to(reference.device)
            vectors.append(self._token_embedder.embed_tokens(character_ids))
        return torch.cat(vectors, dim=0)

    @torch.no_grad()
    def create_cached_cnn_embeddings(self, tokens: List[str]) -> None:
        """Computes the char-CNN vector of every token in `tokens` for word-id input."""
        embeddings = self.token_vectors(
            [ElmoCharacterMapper.bos_token, ElmoCharacterMapper.eos_token] + list(tokens)
        )
        self.register_buffer("_bos_embedding", embeddings[0].clone(), persistent=False)
        self.register_buffer("_eos_embedding", embeddings[1].clone(), persistent=False)
        self._word_embedding = torch.nn.Embedding.from_pretrained(
            embeddings[2:].clone(), freeze=not self._requires_grad, padding_idx=0
        )
