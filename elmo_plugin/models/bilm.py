"""
The `elmo_bilm` model: trains (or fine-tunes) ELMo's biLM as a forward and a backward
language model over a shared token encoder and a shared softmax.
"""
import logging
from typing import Any, Dict, List, Optional, Tuple

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import TextFieldTensors, Vocabulary
from allennlp.models.model import Model
from overrides import overrides

from elmo_plugin.data.bilm_corpus_reader import (
    CHARACTERS_KEY,
    LM_NAMESPACE,
    TARGETS_KEY,
)
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.special_tokens import SPECIAL_TOKENS, UNKNOWN_TOKEN
from elmo_plugin.kernels import allocation, recorded_products
from elmo_plugin.models.carried_windows import CarriedWindowState
from elmo_plugin.models.sampled_softmax import FusedSampledSoftmaxLoss
from elmo_plugin.models.trainable_bilm import TrainableBiLm
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.elmo_lstm import LstmState
from elmo_plugin.training.bilm_metrics import BiLmMetrics
from elmo_plugin.weights import layout
from elmo_plugin.weights.recorded import read_bilm_of_model
from elmo_plugin.weights.options import ElmoOptions

logger = logging.getLogger(__name__)

# Logits computed at once by the full softmax of evaluation (64 Mi numbers, 256 MiB in float32).
_FULL_SOFTMAX_BLOCK = 1 << 26


@Model.register("elmo_bilm")
class ElmoBiLmModel(Model):
    """
    ELMo's biLM as a trainable model: the char-CNN token encoder and the LSTM stack of
    `ElmoBiLm` (the module downstream ELMo uses, so what is trained is what gets exported),
    a forward LM and a backward LM with separate LSTMs, one shared softmax over the
    `lm_tokens` vocabulary (`BiLmVocabulary`), loss = mean of the two directions' mean token
    losses. Data comes from `elmo_bilm_corpus`, as sentences or as packed windows with the
    LSTM state carried from batch to batch (truncated BPTT, as bilm-tf trains).

    The softmax is sampled (AllenNLP's `SampledSoftmaxLoss`, as `FusedSampledSoftmaxLoss`;
    log-uniform candidates, which assumes ids in decreasing frequency) in training and full in
    evaluation, so `allennlp evaluate` reports
    the exact perplexity. Metrics: `forward_perplexity`, `backward_perplexity` and
    `perplexity` (of both directions' tokens together, i.e. exp of the mean of the two mean
    losses, bilm-tf's "average perplexity"); during training they come from the sampled
    softmax and are lower than the true perplexity. Beside them `oov_rate`, and in
    evaluation `in_vocabulary_perplexity` (see `get_metrics`). Bits per character are not
    reported: a
    word-level model with `<UNK>` does not assign a probability to the characters of an
    unknown word, so any per-character figure would not be an honest code length.

    # Parameters

    vocab : `Vocabulary`
        Needs the `lm_tokens` namespace with `<S>`, `</S>` and `<UNK>` (`"type": "bilm"`).
    options : `Dict[str, Any]`, optional
        The architecture, in the format of an ELMo options JSON (`char_cnn`: filters,
        n_highway, activation, embedding dim, ...; `lstm`: dim, projection_dim, n_layers,
        cell_clip, proj_clip, use_skip_connections). Give this or `options_file`. Without
        `char_cnn` the biLM reads words: a `projection_dim` vector per word of the
        vocabulary, tied to the softmax with `"share_embedding_softmax": true`.
    options_file : `str`, optional
        An ELMo options JSON (path or URL), e.g. of a published model to fine-tune.
    weight_file : `str`, optional
        Weights to start from (fine-tuning), in any format of `elmo_plugin.weights.formats`: a
        published options/weight pair, a model directory or archive (then without `options`
        or `options_file`; an ELMoForManyLangs model, a bilm-tf checkpoint, say). The softmax
        starts from the file's trained one where it holds one (a bilm-tf checkpoint with its
        vocabulary, `allennlp elmo-import --vocab-file`, `elmo-export --with-softmax`), row by
        row for the words both vocabularies share; the other rows, and all of them otherwise,
        start fresh.
    dropout : `float`, optional (default = `0.1`)
        bilm-tf's dropout: on every LSTM layer's input and on the top layer's output.
    num_samples : `int`, optional (default = `8192`)
        Negative samples per batch for the sampled softmax (bilm-tf's
        `n_negative_samples_batch`); must be smaller than the vocabulary.
    sparse_softmax : `bool`, optional (default = `False`)
        Sparse gradients for the softmax (for large vocabularies; needs a sparse-capable
        optimizer such as `dense_sparse_adam`).
    training_precision : `str`, optional (default = `"float32"`)
        `"bfloat16"`: training's matrix products (forward and backward) read bfloat16 copies
        of their operands, on CPUs with bfloat16 instructions (AVX512-BF16, AMX); parameters,
        gradients and the optimizer stay float32 (`kernels.recorded_products`). Faster, at a
        small cost in perplexity (BENCHMARKS.md). Evaluation stays float32.
    """

    # `allennlp predict` on an archive of this model: next/previous words, sentence scores.
    default_predictor = "elmo_bilm"

    def __init__(
        self,
        vocab: Vocabulary,
        options: Optional[Dict[str, Any]] = None,
        options_file: Optional[str] = None,
        weight_file: Optional[str] = None,
        dropout: float = 0.1,
        num_samples: int = 8192,
        sparse_softmax: bool = False,
        training_precision: str = recorded_products.FLOAT32,
        **kwargs,
    ) -> None:
        super().__init__(vocab, **kwargs)
        recorded_products.check_training_precision(training_precision)
        self.training_precision = training_precision
        if options is not None and options_file is not None:
            raise ConfigurationError("elmo_bilm: give 'options' or 'options_file', not both.")
        if options is None and options_file is None and weight_file is None:
            raise ConfigurationError(
                "elmo_bilm: give 'options' (an architecture in the options-JSON format), "
                "'options_file', or a 'weight_file' that holds a whole model."
            )
        if options is not None:
            options_file = ElmoOptions.from_dict(options, source="the 'options' of the elmo_bilm model")
        self._check_vocabulary(vocab)
        num_words = vocab.get_vocab_size(LM_NAMESPACE)
        if not 0 < num_samples < num_words:
            raise ConfigurationError(
                f"elmo_bilm: 'num_samples' ({num_samples}) must be positive and smaller than "
                f"the vocabulary ({num_words} words in '{LM_NAMESPACE}')."
            )
        self.num_samples = num_samples
        self.dropout = dropout
        # Without a weight file: an architecture to train from scratch.
        # A trained model's archive builds the biLM from what its weights recorded, without the
        # files it was fine-tuned from (`weights.recorded`).
        options, weights = read_bilm_of_model(options_file, weight_file, kwargs.get("serialization_dir"))
        self._bilm = TrainableBiLm(options, weights, BiLmVocabulary.words(vocab), lstm_input_dropout=dropout)
        self._bilm.record_in_state_dict(options_file, weight_file)
        elmo_options = self._bilm.options
        self._output_dropout = torch.nn.Dropout(dropout)
        self._softmax_loss = FusedSampledSoftmaxLoss(
            num_words=num_words,
            embedding_dim=elmo_options.projection_dim,
            num_samples=num_samples,
            sparse=sparse_softmax,
        )
        if weights is not None and options.softmax_in_weights:  # fine-tuning from a trained softmax
            self._start_from_trained_softmax(*layout.trained_softmax(weights.arrays, options))
        if elmo_options.share_embedding_softmax:
            if sparse_softmax:
                raise ConfigurationError(
                    "elmo_bilm: share_embedding_softmax cannot be combined with sparse_softmax."
                )
            # One parameter, rows in vocabulary order in both (the softmax input is
            # projection_dim wide, as the word vectors are).
            self._softmax_loss.softmax_w = self._bilm.token_embedder.embedding.weight
        self._metrics = BiLmMetrics()
        self._unknown_id = vocab.get_token_index(UNKNOWN_TOKEN, LM_NAMESPACE)
        self._carried_windows = CarriedWindowState()
        # Set by the 'elmo_bilm' trainer callback, which checks the data before the first step
        # and makes checkpoints that `--recover` continues exactly from.
        self.trainer_callback_attached = False
        self._warned_about_trainer_callback = False

    def softmax_arrays(self) -> Dict[str, numpy.ndarray]:
        """The softmax as the layout's datasets (`softmax/W` unless tied to the word
        embedding, `softmax/b`, `vocabulary`)."""
        weight, bias = self._softmax_weight_and_bias()
        arrays = {
            layout.SOFTMAX_BIAS: bias.detach().cpu().float().numpy().copy(),
            layout.VOCABULARY: numpy.array(BiLmVocabulary.words(self.vocab), dtype=object),
        }
        if not self._bilm.options.share_embedding_softmax:
            arrays[layout.SOFTMAX_WEIGHT] = weight.detach().cpu().float().numpy().copy()
        return arrays

    def _softmax_weight_and_bias(self) -> Tuple[torch.Tensor, torch.Tensor]:
        weight, bias = self._softmax_loss.softmax_w, self._softmax_loss.softmax_b
        if isinstance(weight, torch.nn.Embedding):  # sparse_softmax stores them as embeddings
            weight, bias = weight.weight, bias.weight.squeeze(1)
        return weight, bias

    def _start_from_trained_softmax(
        self, file_words: List[str], weight: Optional[numpy.ndarray], bias: numpy.ndarray
    ) -> None:
        """Rows of the weight file's softmax for the words both vocabularies share (by word,
        whatever their ids); the other words keep a fresh row."""
        softmax_w, softmax_b = self._softmax_weight_and_bias()
        row_of = {word: row for row, word in enumerate(file_words)}
        pairs = [(index, row_of[word]) for index, word in enumerate(BiLmVocabulary.words(self.vocab)) if word in row_of]
        if pairs:
            ours, theirs = (torch.tensor(side) for side in zip(*pairs))
            with torch.no_grad():
                if weight is not None:
                    softmax_w[ours] = torch.from_numpy(weight[theirs.numpy()]).to(softmax_w)
                softmax_b[ours] = torch.from_numpy(bias[theirs.numpy()]).to(softmax_b)
        logger.info(
            "elmo_bilm: %d of %d softmax rows start from the weight file's trained softmax "
            "(%d words); the others are new.",
            len(pairs), self.vocab.get_vocab_size(LM_NAMESPACE), len(file_words),
        )

    @staticmethod
    def _check_vocabulary(vocab: Vocabulary) -> None:
        words = vocab.get_token_to_index_vocabulary(LM_NAMESPACE)
        missing = [token for token in SPECIAL_TOKENS if token not in words]
        if missing:
            raise ConfigurationError(
                f"elmo_bilm: the vocabulary's '{LM_NAMESPACE}' namespace lacks "
                f"{', '.join(missing)}; use \"vocabulary\": {{\"type\": \"bilm\", ...}} "
                "(from a bilm-tf vocab file or built from the corpus)."
            )

    @property
    def bilm(self) -> ElmoBiLm:
        """The token encoder and LSTM stack, as downstream ELMo uses them (and export writes)."""
        return self._bilm

    @overrides(check_signature=False)
    def forward(  # type: ignore
        self,
        tokens: Optional[TextFieldTensors] = None,
        forward_tokens: Optional[TextFieldTensors] = None,
        backward_tokens: Optional[TextFieldTensors] = None,
        metadata: Optional[List[Dict[str, int]]] = None,
    ) -> Dict[str, torch.Tensor]:
        """
        # Parameters

        tokens : `TextFieldTensors`, optional
            Sentences with `<S>` and `</S>` (sentence instances); both directions read them.
        forward_tokens, backward_tokens : `TextFieldTensors`, optional
            Packed windows (see `elmo_bilm_corpus`), with `metadata` giving each row's
            stream and step.

        # Returns

        `loss` (the training objective), `forward_loss` and `backward_loss` (each direction's
        negative log-likelihood summed over its predicted tokens, divided by their number; in
        training on packed windows, by the positions of the batch, streams x longest window,
        which is the same for every full batch), and `num_targets`.
        """
        # Only the products of training: evaluation's full softmax stays float32.
        in_bfloat16 = self.training and self.training_precision == recorded_products.BFLOAT16
        if in_bfloat16:
            recorded_products.check_training_precision(self.training_precision, next(self.parameters()).device)
        with recorded_products.bfloat16_products(in_bfloat16):
            return self._losses(tokens, forward_tokens, backward_tokens, metadata)

    def _losses(
        self,
        tokens: Optional[TextFieldTensors],
        forward_tokens: Optional[TextFieldTensors],
        backward_tokens: Optional[TextFieldTensors],
        metadata: Optional[List[Dict[str, int]]],
    ) -> Dict[str, torch.Tensor]:
        if tokens is None and (forward_tokens is None or backward_tokens is None or metadata is None):
            raise ConfigurationError(
                "elmo_bilm: expected a 'tokens' field (sentences) or 'forward_tokens', "
                "'backward_tokens' and 'metadata' (packed windows) from elmo_bilm_corpus."
            )
        if self.training and next(self._bilm.parameters()).device.type == "cpu":
            # Each step frees and allocates the same large tensors again (kernels/allocation.py).
            allocation.keep_freed_memory_for_reuse()
        if tokens is not None:
            forward_output, backward_output, targets, mask = self._read_sentences(tokens)
            forward_targets, backward_targets = targets
            forward_mask = backward_mask = mask
        else:
            forward_ids, forward_target_ids, forward_full_mask = self._unpack(forward_tokens)
            backward_ids, backward_target_ids, backward_full_mask = self._unpack(backward_tokens)
            forward_ids, backward_ids = forward_ids[:, :-1], backward_ids[:, 1:]
            if forward_ids.shape == backward_ids.shape:
                # One pass over both windows: tokens shared between them are encoded once.
                both = self._bilm.embed_character_ids(torch.cat([forward_ids, backward_ids]))
                forward_inputs, backward_inputs = both.split(forward_ids.size(0))
            else:
                forward_inputs = self._bilm.embed_character_ids(forward_ids)
                backward_inputs = self._bilm.embed_character_ids(backward_ids)
            forward_targets = forward_target_ids[:, 1:]
            backward_targets = backward_target_ids[:, :-1]
            forward_mask, backward_mask = forward_full_mask[:, 1:], backward_full_mask[:, 1:]
            initial_state = self._carried_windows.start(
                metadata,
                self.training,
                lambda batch_size: self._bilm.lstm.zero_state(batch_size, forward_inputs),
                forward_inputs,
            )
            self._warn_without_trainer_callback()
            forward_output, backward_output, final_state = self._read(
                forward_inputs, forward_mask, initial_state, backward_inputs, backward_mask
            )
            self._carried_windows.keep(self.training, final_state, metadata)
        output: Dict[str, torch.Tensor] = {}
        direction_losses = []
        num_targets = 0
        for direction, outputs, targets, mask in (
            ("forward", forward_output, forward_targets, forward_mask),
            ("backward", backward_output, backward_targets, backward_mask),
        ):
            predicted, wanted = outputs[mask], targets[mask]
            known = wanted != self._unknown_id
            token_nll = None
            if self.training:
                nll_sum = self._softmax_loss(predicted, wanted)
            else:
                # The full softmax, token by token: the in-vocabulary perplexity needs each loss.
                token_nll = self._full_softmax_nll(predicted, wanted)
                nll_sum = token_nll.sum()
            count = mask.sum()
            self._metrics.record(direction, nll_sum, count, known, token_nll)
            if tokens is None and self.training:
                # Per position the batch holds (streams x window), not per word it holds: the
                # last batches of a pass, where a few streams still have text, then move the
                # weights by their share of a batch. A mean over a dozen words at a full
                # step's size undid an epoch's training (BENCHMARKS.md).
                mean_nll = nll_sum / max(mask.numel(), 1)
            else:
                mean_nll = nll_sum / count.clamp(min=1)
            output[f"{direction}_loss"] = mean_nll
            direction_losses.append(mean_nll)
            num_targets += int(count)
        output["loss"] = 0.5 * (direction_losses[0] + direction_losses[1])
        output["num_targets"] = torch.tensor(num_targets)
        return output

    @staticmethod
    def _unpack(
        tokens: TextFieldTensors,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.BoolTensor]:
        character_ids = tokens[CHARACTERS_KEY]["elmo_tokens"]
        # Not get_text_field_mask: it would read the word ids, where 0 is `<S>`, not padding.
        mask = (character_ids > 0).any(dim=-1)
        return character_ids, tokens[TARGETS_KEY]["tokens"], mask

    def _read(
        self,
        forward_inputs: torch.Tensor,
        forward_mask: torch.BoolTensor,
        initial_state: LstmState,
        backward_inputs: torch.Tensor,
        backward_mask: torch.BoolTensor,
    ) -> Tuple[torch.Tensor, torch.Tensor, LstmState]:
        """Both LMs' top-layer outputs (after the output dropout) and the final LSTM state."""
        layer_outputs, final_state = self._bilm.lstm.forward_with_state(
            forward_inputs, forward_mask, initial_state, backward_inputs, backward_mask
        )
        top_layer = self._output_dropout(layer_outputs[-1])
        forward_output, backward_output = top_layer.split(self._bilm.options.projection_dim, -1)
        return forward_output, backward_output, final_state

    def _read_sentences(
        self, tokens: TextFieldTensors
    ) -> Tuple[torch.Tensor, torch.Tensor, Tuple[torch.Tensor, torch.Tensor], torch.BoolTensor]:
        """
        Sentences (`<S>` w_1 ... w_n `</S>`) read by both LMs: the forward LM's outputs at
        `<S>` ... w_n predict w_1 ... `</S>`, the backward LM's at w_1 ... `</S>` predict
        `<S>` ... w_n. Returns both outputs (batch, length - 1, dim), the (forward, backward)
        target ids and the mask of real positions.
        """
        character_ids, target_ids, mask = self._unpack(tokens)
        embedded = self._bilm.embed_character_ids(character_ids)
        mask = mask[:, 1:]
        initial_state = self._bilm.lstm.zero_state(embedded.size(0), embedded)
        forward_output, backward_output, _ = self._read(
            embedded[:, :-1], mask, initial_state, embedded[:, 1:], mask
        )
        return forward_output, backward_output, (target_ids[:, 1:], target_ids[:, :-1]), mask

    def log_probabilities(self, outputs: torch.Tensor) -> torch.Tensor:
        """The full softmax's log-probabilities (natural log) of every word, for LM outputs."""
        weight, bias = self._softmax_weight_and_bias()
        return torch.log_softmax(outputs @ weight.t() + bias, dim=-1)

    def _full_softmax_nll(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """
        -log P(target) under the full softmax for LM outputs (n, dim) and targets (n,): in
        blocks of rows, so that the (rows, vocabulary) logits stay near `_FULL_SOFTMAX_BLOCK`
        numbers (a whole validation batch of the original recipe would need 16 GB).
        """
        rows = max(1, _FULL_SOFTMAX_BLOCK // self.vocab.get_vocab_size(LM_NAMESPACE))
        return torch.cat(
            [
                -self.log_probabilities(block).gather(-1, block_targets.unsqueeze(-1)).squeeze(-1)
                for block, block_targets in zip(outputs.split(rows), targets.split(rows))
            ]
            or [outputs.new_zeros(0)]
        )

    def score_sentences(self, tokens: TextFieldTensors) -> Dict[str, torch.Tensor]:
        """
        Full-softmax log-probabilities of sentence instances under both LMs (call it in eval
        mode: in training mode the output dropout applies).

        # Returns

        `forward_log_probs` : (batch, n + 1), log P(w_i | w_<i) for w_1 ... w_n and `</S>`.
        `backward_log_probs` : (batch, n + 1), log P(w_i | w_>i) for `<S>`, w_1 ... w_n.
        `mask` : (batch, n + 1), the real positions of both (n differs per sentence).
        `next_word_log_probs` : (batch, vocabulary), the forward LM's distribution of the word
        after w_n (the one `</S>` was scored against; `</S>` itself = the sentence ends).
        `previous_word_log_probs` : (batch, vocabulary), the backward LM's distribution of the
        word before w_1 (`<S>` = the sentence starts there).
        """
        forward_output, backward_output, (forward_targets, backward_targets), mask = (
            self._read_sentences(tokens)
        )
        forward_all = self.log_probabilities(forward_output)
        backward_all = self.log_probabilities(backward_output)
        last = mask.sum(dim=1) - 1
        rows = torch.arange(mask.size(0), device=mask.device)
        return {
            "forward_log_probs": forward_all.gather(-1, forward_targets.unsqueeze(-1)).squeeze(-1)
            * mask,
            "backward_log_probs": backward_all.gather(-1, backward_targets.unsqueeze(-1)).squeeze(-1)
            * mask,
            "mask": mask,
            "next_word_log_probs": forward_all[rows, last],
            "previous_word_log_probs": backward_all[:, 0],
        }

    def word_distributions(self, tokens: TextFieldTensors) -> Dict[str, torch.Tensor]:
        """
        Full-softmax distributions at every word of sentence instances, from each side (call it
        in eval mode), in one pass: what could stand at each position.

        # Returns

        `forward_log_probs` : (batch, n, vocabulary), log P(. | w_<i) at each word w_i (the
        forward LM from the left context).
        `backward_log_probs` : (batch, n, vocabulary), log P(. | w_>i) (the backward LM from
        the right context).
        `mask` : (batch, n), the real words.
        """
        forward_output, backward_output, _, mask = self._read_sentences(tokens)
        # Forward outputs at <S>, w_1 ... w_n predict w_1 ... w_n, </S>; backward outputs at
        # w_1 ... w_n, </S> predict <S>, w_1 ... w_n (`score_sentences`).
        return {
            "forward_log_probs": self.log_probabilities(forward_output)[:, :-1],
            "backward_log_probs": self.log_probabilities(backward_output)[:, 1:],
            "mask": mask[:, 1:],
        }

    def _warn_without_trainer_callback(self) -> None:
        if self.training and not self.trainer_callback_attached and not self._warned_about_trainer_callback:
            self._warned_about_trainer_callback = True
            logger.warning(
                "elmo_bilm: training on packed windows without the 'elmo_bilm' trainer callback "
                "(trainer.callbacks: [{\"type\": \"elmo_bilm\"}], as in "
                "training_config/bilm/bilm.libsonnet): the validation data is not checked before "
                "this first step, and `allennlp train --recover` cannot restore the carried LSTM "
                "state, the random generators or the running metrics."
            )

    def recovery_state(self) -> Dict[str, Any]:
        """
        What a checkpoint must hold besides the parameters for `allennlp train --recover` to
        continue an epoch exactly where it stopped (the `elmo_bilm` trainer callback saves it):
        the LSTM state carried between packed windows (training and validation streams), and
        the metrics' running totals.
        """
        return {
            "carried": self._carried_windows.recovery_state(),
            "metrics": self._metrics.state(),
        }

    def restore_recovery_state(self, state: Dict[str, Any]) -> None:
        """Continues from `recovery_state()` as a checkpoint saved it."""
        self._carried_windows.restore(state["carried"])
        self._metrics.restore(state["metrics"])

    @overrides
    def get_metrics(self, reset: bool = False) -> Dict[str, float]:
        """`forward_perplexity`, `backward_perplexity`, `perplexity`, `oov_rate` and, in
        evaluation, `in_vocabulary_perplexity` (`BiLmMetrics.get_metrics`)."""
        return self._metrics.get_metrics(reset)
