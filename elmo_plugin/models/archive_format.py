"""
A trained `elmo_bilm` model as a weight format: its `model.tar.gz` or its serialization
directory, read wherever ELMo files are read (`allennlp elmo --weight-file bilm/model.tar.gz`,
`Elmo`, `elmo_token_embedder`, `ElmoEmbedder`, the `weight_file` a fine-tuning starts from) as
`allennlp elmo-export --with-softmax` would write it. No export step between training a biLM
and using it.

It lives beside the model, not in `weights/formats/`, because reading it needs the model
(AllenNLP's `load_archive`); it registers as a `WeightFormat` like the others, so every reader
finds it.
"""
import dataclasses
import json
import os
from typing import List, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME, load_archive
from overrides import overrides

from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models.export import bilm_weights_of_model
from elmo_plugin.weights.formats import BiLmWeights, ModelFiles, WeightFormat
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.recorded import trained_weights_path

_MODEL_TYPE = "elmo_bilm"


def _is_trained_bilm(directory: str) -> bool:
    config_path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(config_path) or trained_weights_path(directory) is None:
        return False
    try:
        with open(config_path, encoding="utf-8") as config_file:
            model = json.load(config_file).get("model")
    except (OSError, ValueError, AttributeError):  # not AllenNLP's config.json
        return False
    return isinstance(model, dict) and model.get("type") == _MODEL_TYPE


@WeightFormat.register("allennlp_bilm")
class TrainedBiLmFormat(WeightFormat):
    """An `elmo_bilm` model trained by `allennlp train`: read-only (export it to write one)."""

    expects = (
        f"an archive or serialization directory of an {_MODEL_TYPE} model from allennlp train "
        f"({CONFIG_NAME} of model type {_MODEL_TYPE!r}, and weights.th or best.th)"
    )

    @overrides
    def recognizes(self, files: ModelFiles) -> bool:
        directory = files.model_directory()
        return directory is not None and _is_trained_bilm(directory)

    @overrides
    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        directory = files.model_directory()
        source = files.weight_file or files.options_file
        try:
            model = load_archive(directory).model
        except ConfigurationError:
            raise
        except Exception as error:  # torch, pickle and zipfile each raise their own on a damaged file
            raise ConfigurationError(
                f"Cannot read the trained biLM {source}: its weights are damaged or truncated "
                f"({type(error).__name__}: {error})."
            ) from error
        if not isinstance(model, ElmoBiLmModel):  # a config.json that names elmo_bilm says so
            raise ConfigurationError(f"{source} holds a {type(model).__name__}, not an {_MODEL_TYPE} model.")
        weights = bilm_weights_of_model(model, with_softmax=True, source=str(source))
        if options is not None:
            differing = _differing_architecture(options, weights.options)
            if differing:
                raise ConfigurationError(
                    f"{source} holds a biLM whose {', '.join(differing)} differ from the options "
                    "given with it; give the archive alone (it holds its own options)."
                )
        return weights


def _differing_architecture(given: ElmoOptions, held: ElmoOptions) -> List[str]:
    """The architecture's fields (not training keys or the vocabulary's size) that differ."""
    ignored = {"extra", "n_tokens_vocab", "softmax_in_weights"}
    return [
        field.name
        for field in dataclasses.fields(ElmoOptions)
        if field.name not in ignored and getattr(given, field.name) != getattr(held, field.name)
    ]
