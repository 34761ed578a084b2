# Re-exports: the public names of this subpackage that inference uses. The biLM training data
# (`bilm_corpus_reader`, `bilm_vocabulary`) is imported from its modules, so that importing
# the character mapping does not import training code.
# ruff: noqa: F401
from elmo_plugin.data.character_mapper import ElmoCharacterMapper, batch_to_ids
from elmo_plugin.data.token_indexer import ElmoTokenCharactersIndexer
