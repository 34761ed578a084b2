"""
The `elmo_token_embedder`: ELMo as a `TokenEmbedder` inside any AllenNLP model.
"""
from typing import List, Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data.vocabulary import Vocabulary
from allennlp.modules.token_embedders.token_embedder import TokenEmbedder
from overrides import overrides

from elmo_plugin.modules.elmo import Elmo
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.weights import pretrained


@TokenEmbedder.register("elmo_token_embedder", exist_ok=True)
class ElmoTokenEmbedder(TokenEmbedder):
    """
    One ELMo representation per token (a single scalar mix of the biLM layers), optionally
    projected. Reads the `elmo_tokens` (and, with `namespace_to_cache`, `word_inputs`)
    produced by the `elmo_characters` indexer.

    # Parameters

    options_file : `str`, optional
        Path or URL of the biLM options, or of a model directory or archive.
    weight_file : `str`, optional
        Path or URL of the biLM weights (any format of `elmo_plugin.weights.formats`), or of a
        model directory or archive. With neither file given: the published original ELMo.
    do_layer_norm : `bool`, optional (default = `False`)
        Layer-normalise the biLM layers before mixing.
    dropout : `float`, optional (default = `0.5`)
        Dropout on the ELMo representation.
    requires_grad : `bool`, optional (default = `False`)
        Fine-tune the biLM (see `ElmoSettings`, as for `vocab_to_cache`, `stateful` and
        `precision`).
    projection_dim : `int`, optional (default = `None`)
        If given, a linear projection of the representation to this size.
    vocab_to_cache : `List[str]`, optional (default = `None`)
        Words whose token-layer vectors are precomputed (word ids then index this list).
    scalar_mix_parameters : `List[float]`, optional (default = `None`)
        Fixed, untrained mixing weights (pre-softmax), one per biLM layer.
    namespace_to_cache : `str`, optional (default = `None`)
        Cache the words of this vocabulary namespace (AllenNLP 0.9's option); use with the
        `elmo_characters` indexer's `cache_namespace`. Excludes `vocab_to_cache`.
    vocab : `Vocabulary`, optional
        Supplied by AllenNLP; needed for `namespace_to_cache`.
    stateful : `bool`, optional (default = `True`)
        Carry biLM state across batches (AllenNLP's behaviour) or not.
    precision : `str`, optional (default = `"float32"`)
        `"bfloat16"` or `"int8"` for faster inference at a measured cost in fidelity; not
        with `requires_grad`.
    serialization_dir : `str`, optional
        Supplied by AllenNLP (the model's directory, while training and loading): a trained
        model loads its ELMo from what its weights recorded, without the files (`ElmoBiLm`).
    """

    def __init__(
        self,
        options_file: Optional[str] = None,
        weight_file: Optional[str] = None,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        requires_grad: bool = ElmoSettings.requires_grad,
        projection_dim: Optional[int] = None,
        vocab_to_cache: Optional[List[str]] = ElmoSettings.vocab_to_cache,
        scalar_mix_parameters: Optional[List[float]] = None,
        namespace_to_cache: Optional[str] = None,
        vocab: Optional[Vocabulary] = None,
        stateful: bool = ElmoSettings.stateful,
        precision: str = ElmoSettings.precision,
        serialization_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        if namespace_to_cache is not None:
            if vocab_to_cache is not None:
                raise ConfigurationError(
                    "elmo_token_embedder: give vocab_to_cache or namespace_to_cache, not both"
                )
            if vocab is None:
                raise ConfigurationError(
                    "elmo_token_embedder: namespace_to_cache needs a vocabulary"
                )
            vocab_to_cache = [
                vocab.get_token_from_index(index, namespace_to_cache)
                for index in range(vocab.get_vocab_size(namespace_to_cache))
            ]
        settings = ElmoSettings(requires_grad, stateful, precision, vocab_to_cache)
        options_file, weight_file = pretrained.files_or_default(options_file, weight_file)
        self._elmo = Elmo(
            None,
            None,
            1,
            do_layer_norm=do_layer_norm,
            dropout=dropout,
            scalar_mix_parameters=scalar_mix_parameters,
            module=ElmoBiLm.from_settings(options_file, weight_file, settings, serialization_dir),
        )
        self._projection: Optional[torch.nn.Linear] = None
        self.output_dim = self._elmo.get_output_dim()
        if projection_dim:
            self._projection = torch.nn.Linear(self.output_dim, projection_dim)
            self.output_dim = projection_dim

    @overrides
    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(
        self, elmo_tokens: torch.Tensor, word_inputs: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """
        # Parameters

        elmo_tokens : `torch.Tensor`
            Character ids `(batch_size, timesteps, 50)` (or more leading dimensions).
        word_inputs : `torch.Tensor`, optional
            Word ids `(batch_size, timesteps)` for a cached vocabulary.

        # Returns

        `(batch_size, timesteps, output_dim)`.
        """
        representation = self._elmo(elmo_tokens, word_inputs)["elmo_representations"][0]
        if self._projection is not None:
            representation = self._projection(representation)
        return representation
