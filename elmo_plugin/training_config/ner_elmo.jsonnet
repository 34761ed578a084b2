// Named entity recognition on CoNLL-2003 with ELMo (the paper's section 4 NER model; see
// crf_tagger_elmo.libsonnet), tags converted to BIOUL.
//
//   NER_TRAIN_DATA_PATH=eng.train NER_VALIDATION_DATA_PATH=eng.testa \
//     allennlp train training_config/ner_elmo.jsonnet -s output/ner \
//       --include-package elmo_plugin --include-package allennlp_models.tagging
//
// ELMo files: see elmo.libsonnet.
local labels = import 'labels.libsonnet';
local tagger = import 'crf_tagger_elmo.libsonnet';

tagger.config(
  reader={ type: 'conll2003', tag_label: 'ner' },
  train_data_path=std.extVar('NER_TRAIN_DATA_PATH'),
  validation_data_path=std.extVar('NER_VALIDATION_DATA_PATH'),
  labels=labels.bioul(labels.ner_types),
)
