"""
elmo_plugin: ELMo (Peters et al. 2018) for AllenNLP, end to end.

Importing the package registers its components under AllenNLP's names (`elmo_characters`,
`elmo_token_embedder`), replacing AllenNLP's own implementations in every config, and adds
the biLM training pieces (`elmo_bilm` model, `elmo_bilm_corpus` reader, `bilm` vocabulary).
It also sets defaults for the ELMo environment variables the task configs read (see
`elmo_plugin.training.config_environment`).
"""
# AllenNLP's own ELMo classes must be registered before ours replace them (`exist_ok=True`);
# importing these packages registers them, and would raise if it came after our registration.
import allennlp.data.token_indexers  # noqa: F401,E402
import allennlp.modules.token_embedders  # noqa: F401,E402

import elmo_plugin_warnings  # noqa: F401  (first: filters must precede allennlp's imports)
from elmo_plugin.commands import (  # noqa: E402,F401  (registers the subcommands)
    ElmoCommand,
    ElmoExportCommand,
    ElmoImportCommand,
    ElmoTokenVectorsCommand,
)
from elmo_plugin.data import (  # noqa: E402
    ElmoCharacterMapper,
    ElmoTokenCharactersIndexer,
    batch_to_ids,
)
from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader  # noqa: E402
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary  # noqa: E402
from elmo_plugin.data.bilm_window_loader import BiLmWindowLoader  # noqa: E402,F401
from elmo_plugin.models import ElmoBiLmModel  # noqa: E402
from elmo_plugin.models.training_callback import BiLmTrainingCallback  # noqa: E402,F401
from elmo_plugin.modules import Elmo, ElmoBiLm, ElmoSettings, ElmoTokenEmbedder  # noqa: E402
from elmo_plugin.inference import ElmoEmbedder  # noqa: E402
from elmo_plugin.predictors import ElmoBiLmPredictor  # noqa: E402
from elmo_plugin.training.checkpointer import AtomicCheckpointer  # noqa: E402,F401
from elmo_plugin.training.config_environment import (  # noqa: E402
    apply_config_environment_defaults,
)
from elmo_plugin.weights import ElmoOptions  # noqa: E402

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
