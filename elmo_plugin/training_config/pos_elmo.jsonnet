// Part-of-speech tagging with ELMo on `word/TAG word/TAG ...` lines, one sentence per line
// (the format of the Brown corpus and of the WSJ sample's tagged files; a word may itself
// contain '/': the tag follows the last one). For another delimiter, e.g. `word###TAG`:
//   -o '{"dataset_reader.word_tag_delimiter": "###"}'
//
//   POS_TRAIN_DATA_PATH=train.txt POS_VALIDATION_DATA_PATH=dev.txt \
//     allennlp train training_config/pos_elmo.jsonnet -s output/pos --include-package elmo_plugin
//
// Word embeddings from scratch + character CNN + ELMo, a 1-layer biLSTM and a softmax per
// token (simple_tagger), scored by accuracy. ELMo files: see elmo.libsonnet.
local elmo = import 'elmo.libsonnet';
local word_dim = 50;
local character_dim = 64;

{
  dataset_reader: {
    type: 'sequence_tagging',
    word_tag_delimiter: '/',
    token_indexers: {
      tokens: { type: 'single_id', lowercase_tokens: true },
      token_characters: { type: 'characters', min_padding_length: 3 },
      elmo: elmo.indexer,
    },
  },
  train_data_path: std.extVar('POS_TRAIN_DATA_PATH'),
  validation_data_path: std.extVar('POS_VALIDATION_DATA_PATH'),
  // Tag sets differ between corpora (the Brown corpus's compound tags, PTB's 45), so the labels
  // get an unknown entry instead of a fixed list: a tag the training data lacks is an error of
  // the tagger on test data, not a crash.
  vocabulary: { non_padded_namespaces: ['*tags'] },
  model: {
    type: 'simple_tagger',
    text_field_embedder: {
      token_embedders: {
        tokens: { type: 'embedding', embedding_dim: word_dim, trainable: true },
        token_characters: {
          type: 'character_encoding',
          embedding: { embedding_dim: 16, vocab_namespace: 'token_characters' },
          encoder: {
            type: 'cnn',
            embedding_dim: 16,
            num_filters: character_dim,
            ngram_filter_sizes: [3],
            conv_layer_activation: 'relu',
          },
          dropout: 0.2,
        },
        elmo: elmo.embedder(),
      },
    },
    encoder: {
      type: 'lstm',
      input_size: word_dim + character_dim + elmo.dim,
      hidden_size: 128,
      num_layers: 1,
      bidirectional: true,
    },
    regularizer: elmo.regularizer,
  },
  data_loader: { batch_size: 32, shuffle: true },
  trainer: elmo.trainer_logging + {
    optimizer: { type: 'adam', lr: 0.001 },
    validation_metric: '+accuracy',
    num_epochs: 40,
    grad_norm: 5.0,
    patience: 10,
  },
}
