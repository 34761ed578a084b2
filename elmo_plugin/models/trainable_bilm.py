"""
The biLM as the `elmo_bilm` model trains it: `ElmoBiLm` with what only training needs.
"""
from typing import List, Optional

import torch

from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.weights.formats import BiLmWeights
from elmo_plugin.weights.options import ElmoOptions


class TrainableBiLm(ElmoBiLm):
    """
    An `ElmoBiLm` being trained: gradients everywhere, no carried state between sentences
    (the model carries window state itself), dropout on every LSTM layer's input, and the LSTM
    gate biases kept as the weight file stores them (see `TfForgetBias`), so that the trained
    biLM exports bit-exactly.

    # Parameters

    options : `ElmoOptions`
        The architecture.
    weights : `BiLmWeights`, optional
        The weights to start from (fine-tuning); `None` trains from scratch.
    words : `List[str]`, optional
        A word-input biLM's words in id order, to train one from scratch (a word-input weight
        file holds its own; if both are given they must agree). Not used by a character-input
        biLM.
    lstm_input_dropout : `float`, optional (default = `0.0`)
        Dropout on every LSTM layer's input in training mode (bilm-tf's regularisation).
    """

    def __init__(
        self,
        options: ElmoOptions,
        weights: Optional[BiLmWeights],
        words: Optional[List[str]] = None,
        lstm_input_dropout: float = 0.0,
    ) -> None:
        # Not ElmoBiLm's constructor, which reads files and refuses to start without weights:
        # the model read them (it needs the trained softmax too), and from scratch is the point.
        torch.nn.Module.__init__(self)
        self._words = words
        self._lstm_input_dropout = lstm_input_dropout
        self._build(options, weights, ElmoSettings(requires_grad=True, stateful=False))

    def _words_to_train(self) -> Optional[List[str]]:
        return self._words

    def _before_loading_weights(self, lstm: ElmoLstm) -> None:
        lstm.set_input_dropout(self._lstm_input_dropout)
        lstm.store_biases_as_in_file()
