"""
elmo_plugin: ELMo (Peters et al. 2018) for AllenNLP, end to end.

Importing the package registers its components under AllenNLP's names (`elmo_characters`,
`elmo_token_embedder`), replacing AllenNLP's own implementations in every config, and adds
the biLM training pieces (`elmo_bilm` model, `elmo_bilm_corpus` reader, `bilm` vocabulary).
It also sets defaults for the three ELMo environment variables the task configs read, when
they are unset (`elmo_plugin.training.config_environment` says why on import).
"""
from elmo_plugin.common.installation import missing_dependency, warn_if_torch_untested

try:
    # Harmless warnings of the pinned stack, filtered before allennlp imports its dependencies
    # (the start-up .pth installs the same filters earlier, where it is installed).
    import elmo_plugin_warnings  # noqa: F401

    # AllenNLP's own ELMo classes must be registered before ours replace them (`exist_ok=True`);
    # importing these packages registers them, and would raise if it came after our registration.
    import allennlp.data.token_indexers  # noqa: F401
    import allennlp.modules.token_embedders  # noqa: F401
    import torch

    from elmo_plugin.commands import (  # noqa: F401  (registers the subcommands)
        ElmoCommand,
        ElmoExportCommand,
        ElmoImportCommand,
        ElmoTokenVectorsCommand,
    )
    from elmo_plugin.data import ElmoCharacterMapper, ElmoTokenCharactersIndexer, batch_to_ids
    from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
    from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
    from elmo_plugin.data.bilm_window_loader import BiLmWindowLoader  # noqa: F401
    from elmo_plugin.models import ElmoBiLmModel
    from elmo_plugin.models.training_callback import BiLmTrainingCallback  # noqa: F401
    from elmo_plugin.modules import Elmo, ElmoBiLm, ElmoSettings, ElmoTokenEmbedder
    from elmo_plugin.inference import ElmoEmbedder
    from elmo_plugin.predictors import ElmoBiLmPredictor
    from elmo_plugin.training.checkpointer import AtomicCheckpointer  # noqa: F401
    from elmo_plugin.training.config_environment import apply_config_environment_defaults
    from elmo_plugin.training.fused_adagrad import FusedAdagradOptimizer  # noqa: F401
    from elmo_plugin.weights import ElmoOptions
except ModuleNotFoundError as error:
    # AllenNLP cannot be a pip dependency (see elmo_plugin.common.installation): say what to run.
    missing = missing_dependency(error)
    if missing is None:
        raise
    raise missing from None

warn_if_torch_untested(torch.__version__)

# Before `allennlp` reads a config: the ELMo files of training_config/'s task configs.
apply_config_environment_defaults()

__all__ = [
    "BiLmCorpusReader",
    "BiLmVocabulary",
    "Elmo",
    "ElmoBiLm",
    "ElmoBiLmModel",
    "ElmoBiLmPredictor",
    "ElmoCharacterMapper",
    "ElmoEmbedder",
    "ElmoOptions",
    "ElmoSettings",
    "ElmoTokenCharactersIndexer",
    "ElmoTokenEmbedder",
    "batch_to_ids",
]
