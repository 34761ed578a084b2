# Re-exports: the public names of this subpackage.
# ruff: noqa: F401
from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.character_mapper import ElmoCharacterMapper, batch_to_ids
from elmo_plugin.data.token_indexer import ElmoTokenCharactersIndexer
