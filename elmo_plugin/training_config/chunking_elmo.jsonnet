// Chunking on CoNLL-2000 (`word POS chunk` per line) with ELMo, tags converted to BIOUL; the
// tagger is crf_tagger_elmo.libsonnet's.
//
//   CHUNKING_TRAIN_DATA_PATH=train.txt CHUNKING_VALIDATION_DATA_PATH=test.txt \
//     allennlp train training_config/chunking_elmo.jsonnet -s output/chunking \
//       --include-package elmo_plugin --include-package allennlp_models.tagging
//
// ELMo files: see elmo.libsonnet.
local labels = import 'labels.libsonnet';
local tagger = import 'crf_tagger_elmo.libsonnet';

tagger.config(
  reader={ type: 'conll2000', tag_label: 'chunk' },
  train_data_path=std.extVar('CHUNKING_TRAIN_DATA_PATH'),
  validation_data_path=std.extVar('CHUNKING_VALIDATION_DATA_PATH'),
  labels=labels.bioul(labels.chunk_types),
)
