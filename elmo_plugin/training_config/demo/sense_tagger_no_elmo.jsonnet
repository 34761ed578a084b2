// The same sense tagger without ELMo: word embeddings only. See sense_tagger.libsonnet.
local tagger = import 'sense_tagger.libsonnet';

tagger.config(null)
