// The sequence labeller shared by ner_elmo.jsonnet and chunking_elmo.jsonnet: Peters et al.
// (2017)'s CRF tagger -- word embeddings trained from scratch (no GloVe download), a character
// CNN, ELMo, a 2-layer biLSTM and a CRF with BIOUL-constrained decoding, scored by span F1.
local elmo = import 'elmo.libsonnet';
local word_dim = 50;
local character_dim = 128;

{
  // labels: every label of the task (labels.libsonnet), so that test data may hold labels the
  // training data lacks.
  config(reader, train_data_path, validation_data_path, labels):: {
    dataset_reader: reader {
      convert_to_coding_scheme: 'BIOUL',
      token_indexers: {
        tokens: { type: 'single_id', lowercase_tokens: true },
        token_characters: { type: 'characters', min_padding_length: 3 },
        elmo: elmo.indexer,
      },
    },
    train_data_path: train_data_path,
    validation_data_path: validation_data_path,
    vocabulary: { tokens_to_add: { labels: labels } },
    model: {
      type: 'crf_tagger',
      label_encoding: 'BIOUL',
      constrain_crf_decoding: true,
      calculate_span_f1: true,
      include_start_end_transitions: false,
      dropout: 0.5,
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
          },
          elmo: elmo.embedder(),
        },
      },
      encoder: {
        type: 'lstm',
        input_size: word_dim + character_dim + elmo.dim,
        hidden_size: 200,
        num_layers: 2,
        dropout: 0.5,
        bidirectional: true,
      },
      regularizer: elmo.regularizer,
    },
    data_loader: { batch_size: 64, shuffle: true },
    trainer: elmo.trainer_logging + {
      optimizer: { type: 'adam', lr: 0.001 },
      validation_metric: '+f1-measure-overall',
      num_epochs: 75,
      grad_norm: 5.0,
      patience: 25,
    },
  },
}
