"""
The `Elmo` module: task-specific weighted sums (scalar mixes) of the biLM's layers.
"""
import logging
from typing import Dict, List, Optional, Union

import torch
from allennlp.common import FromParams
from allennlp.common.checks import ConfigurationError
from allennlp.modules.scalar_mix import ScalarMix
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.settings import ElmoSettings

logger = logging.getLogger(__name__)


class Elmo(torch.nn.Module, FromParams):
    """
    ELMo representations (Peters et al. 2018): `num_output_representations` learned scalar
    mixes of the biLM's layers, with dropout. Same signature and outputs as AllenNLP's
    `allennlp.modules.elmo.Elmo`.

    # Parameters

    options_file : `str`
        Path or URL of the biLM's options JSON (or of a model directory or archive).
    weight_file : `str`
        Path or URL of the biLM's weights, in any format of `elmo_plugin.weights.formats` (or of
        a model directory or archive).
    num_output_representations : `int`
        How many independent scalar mixes (e.g. one for the input and one for the output of a
        task model).
    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM's parameters (see `ElmoSettings`, as for `vocab_to_cache`,
        `stateful` and `precision`).
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalise each biLM layer before mixing.
    dropout : `float`, optional (default = `0.5`)
        Dropout applied to each representation.
    vocab_to_cache : `List[str]`, optional (default = `None`)
        Precompute token-layer vectors for these words; `forward` then also takes word ids.
    keep_sentence_boundaries : `bool`, optional (default = `False`)
        Keep the `<S>` and `</S>` positions in the outputs.
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed (untrained) pre-softmax mixing weights, one per biLM layer.
    module : `torch.nn.Module`, optional (default = `None`)
        An already constructed biLM to use instead of loading one from the files.
    stateful : `bool`, optional (default = `True`)
        Carry the LSTM state across batches (AllenNLP's behaviour) or start every sentence
        from the same state (`False`: vectors depend only on the sentence).
    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"` for faster inference at a measured cost in fidelity; not
        with `requires_grad`.
    serialization_dir : `str`, optional
        Supplied by AllenNLP where a config builds this module (the model's directory, while
        training and loading): a trained model loads its ELMo from what its weights recorded,
        without the files (`ElmoBiLm`).
    """

    def __init__(
        self,
        options_file: Optional[str],
        weight_file: Optional[str],
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Optional[List[str]] = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Optional[List[float]] = None,
        module: Optional[torch.nn.Module] = None,
        stateful: bool = ElmoSettings.stateful,
        precision: str = ElmoSettings.precision,
        serialization_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        if module is not None:
            if options_file is not None or weight_file is not None:
                raise ConfigurationError("Don't provide options_file or weight_file with module")
            # AllenNLP's attribute name for the biLM, which client code written for AllenNLP
            # uses (`elmo._elmo_lstm._elmo_lstm.reset_states()`, flair, 0.9's code).
            self._elmo_lstm = module
        else:
            if options_file is None and weight_file is None:
                raise ConfigurationError(
                    "Elmo needs options_file and weight_file (or a model directory or archive as "
                    "either, or module)"
                )
            settings = ElmoSettings(requires_grad, stateful, precision, vocab_to_cache)
            self._elmo_lstm = ElmoBiLm.from_settings(options_file, weight_file, settings, serialization_dir)
        self._has_cached_vocab = (
            vocab_to_cache is not None or getattr(self._elmo_lstm, "_word_embedding", None) is not None
        )
        self._keep_sentence_boundaries = keep_sentence_boundaries
        self._dropout = torch.nn.Dropout(p=dropout)
        self._scalar_mixes: List[ScalarMix] = []
        for k in range(num_output_representations):
            scalar_mix = ScalarMix(
                self._elmo_lstm.num_layers,
                do_layer_norm=do_layer_norm,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            self.add_module(f"scalar_mix_{k}", scalar_mix)
            self._scalar_mixes.append(scalar_mix)

    def get_output_dim(self) -> int:
        return self._elmo_lstm.get_output_dim()

    def forward(
        self, inputs: torch.Tensor, word_inputs: Optional[torch.Tensor] = None
    ) -> Dict[str, Union[torch.Tensor, List[torch.Tensor]]]:
        """
        # Parameters

        inputs : `torch.Tensor`
            Character ids `(batch_size, timesteps, 50)`, or with more leading dimensions
            (e.g. `(batch_size, num_sentences, timesteps, 50)`), which are flattened and restored.
        word_inputs : `torch.Tensor`, optional
            Word ids `(batch_size, timesteps)` (or more leading dimensions) into
            `vocab_to_cache`; ignored, with a warning, if no vocabulary was cached.

        # Returns

        `{"elmo_representations": [num_output_representations tensors of shape
        (..., timesteps, output_dim)], "mask": (..., timesteps) bool}`.
        """
        original_shape = inputs.size()
        if len(original_shape) > 3:
            timesteps, num_characters = original_shape[-2:]
            reshaped_inputs = inputs.view(-1, timesteps, num_characters)
        else:
            reshaped_inputs = inputs

        original_word_size = None
        reshaped_word_inputs = None
        if word_inputs is not None:
            if not self._has_cached_vocab:
                logger.warning("Word inputs were passed to ELMo but it does not have a cached vocab.")
            else:
                original_word_size = word_inputs.size()
                reshaped_word_inputs = word_inputs.view(-1, original_word_size[-1])

        bilm_output = self._elmo_lstm(reshaped_inputs, reshaped_word_inputs)
        layer_activations = bilm_output["activations"]
        mask_with_bos_eos = bilm_output["mask"]

        representations = []
        mask = mask_with_bos_eos
        for scalar_mix in self._scalar_mixes:
            representation = scalar_mix(layer_activations, mask_with_bos_eos)
            if not self._keep_sentence_boundaries:
                representation, mask = remove_sentence_boundaries(representation, mask_with_bos_eos)
            representations.append(self._dropout(representation))

        if original_word_size is not None and len(original_word_size) > 2:
            leading_shape = original_word_size
        elif len(original_shape) > 3:
            leading_shape = original_shape[:-1]
        else:
            return {"elmo_representations": representations, "mask": mask}
        if self._keep_sentence_boundaries:
            leading_shape = leading_shape[:-1] + (leading_shape[-1] + 2,)
        return {
            "elmo_representations": [r.view(leading_shape + (-1,)) for r in representations],
            "mask": mask.view(leading_shape),
        }
