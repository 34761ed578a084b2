// Sentence classification (e.g. movie-review polarity) with a frozen biLM: only ELMo's scalar
// mix and the classifier are trained. Data: JSON lines `{"text": "...", "label": "pos"}`
// (AllenNLP's text_classification_json), tokenised on whitespace.
//
//   SENTIMENT_TRAIN_DATA_PATH=train.jsonl SENTIMENT_VALIDATION_DATA_PATH=dev.jsonl \
//     allennlp train training_config/sentiment_elmo.jsonnet -s output/sentiment \
//       --include-package elmo_plugin
//
// Word embeddings from scratch + ELMo, read by a biLSTM whose final states (seq2vec `lstm`)
// feed the classifier. ELMo files: see elmo.libsonnet; a biLM trained with this package on
// text of the same domain (as the ELMo seeds did for movie reviews) is the natural choice.
local elmo = import 'elmo.libsonnet';
local word_dim = 50;

{
  dataset_reader: {
    type: 'text_classification_json',
    tokenizer: { type: 'whitespace' },
    token_indexers: {
      tokens: { type: 'single_id', lowercase_tokens: true },
      elmo: elmo.indexer,
    },
  },
  train_data_path: std.extVar('SENTIMENT_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('SENTIMENT_VALIDATION_DATA_PATH'),
  model: {
    type: 'basic_classifier',
    text_field_embedder: {
      token_embedders: {
        tokens: { type: 'embedding', embedding_dim: word_dim, trainable: true },
        elmo: elmo.embedder(requires_grad=false),
      },
    },
    seq2vec_encoder: {
      type: 'lstm',
      input_size: word_dim + elmo.dim,
      hidden_size: 128,
      bidirectional: true,
    },
    dropout: 0.3,
    regularizer: elmo.regularizer,
  },
  data_loader: { batch_size: 32, shuffle: true },
  trainer: elmo.trainer_logging + {
    optimizer: { type: 'adam', lr: 0.001 },
    validation_metric: '+accuracy',
    num_epochs: 10,
    grad_norm: 5.0,
    patience: 3,
  },
}
