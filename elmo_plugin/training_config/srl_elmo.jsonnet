// Semantic role labelling with ELMo: AllenNLP's ELMo how-to and He et al. (2017)'s deep
// biLSTM, as in the ELMo paper (section 4). allennlp-models' `srl` reader and model; the
// encoder's input is the ELMo vector plus the verb-indicator embedding, derived from ELMO_DIM.
//
//   SRL_TRAIN_DATA_PATH=... SRL_VALIDATION_DATA_PATH=... \
//     allennlp train training_config/srl_elmo.jsonnet -s output/srl \
//       --include-package elmo_plugin --include-package allennlp_models.structured_prediction
//
// Data: directories of OntoNotes 5.0 `*.gold_conll` files (CoNLL-2012 format). ELMo files:
// see elmo.libsonnet (the published original ELMo unless ELMO_* variables say otherwise).
// Span F1 is computed by the official srl-eval.pl (needs `perl`).
local elmo = import 'elmo.libsonnet';
local labels = import 'labels.libsonnet';
local verb_indicator_dim = 100;

{
  dataset_reader: {
    type: 'srl',
    token_indexers: { elmo: elmo.indexer },
  },
  train_data_path: std.extVar('SRL_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('SRL_VALIDATION_DATA_PATH'),
  vocabulary: { tokens_to_add: { labels: labels.bio(labels.srl_roles) } },
  model: {
    type: 'srl',
    text_field_embedder: {
      token_embedders: { elmo: elmo.embedder() },
    },
    initializer: {
      regexes: [['tag_projection_layer.*weight', { type: 'orthogonal' }]],
    },
    encoder: {
      type: 'alternating_lstm',
      input_size: elmo.dim + verb_indicator_dim,
      hidden_size: 300,
      num_layers: 8,
      recurrent_dropout_probability: 0.1,
      use_highway: true,
    },
    binary_feature_dim: verb_indicator_dim,
    regularizer: elmo.regularizer,
  },
  data_loader: {
    batch_sampler: { type: 'bucket', batch_size: 80 },
  },
  trainer: elmo.trainer_logging + {
    num_epochs: 500,
    grad_clipping: 1.0,
    patience: 200,
    validation_metric: '+f1-measure-overall',
    optimizer: { type: 'adadelta', rho: 0.95 },
  },
}
