// The downstream task of `make demo`: tag each ambiguous word with its sense (B-bats.animal,
// B-bats.sport, ...; O elsewhere), scored by span F1. The tagger has no encoder of its own
// (pass_through): each tag is predicted from that token's vector alone, so any use of context
// has to come from the token vectors. Paths come from the environment (AllenNLP passes it to
// Jsonnet as external variables): DEMO_TAGGING_TRAIN, DEMO_TAGGING_DEV, and for ELMo
// DEMO_ELMO_OPTIONS, DEMO_ELMO_WEIGHTS.
local word_dim = 16;

{
  config(elmo):: {
    dataset_reader: {
      type: 'sequence_tagging',
      token_indexers: { tokens: { type: 'single_id' } }
                      + (if elmo == null then {} else { elmo: { type: 'elmo_characters' } }),
    },
    train_data_path: std.extVar('DEMO_TAGGING_TRAIN'),
    validation_data_path: std.extVar('DEMO_TAGGING_DEV'),
    model: {
      type: 'simple_tagger',
      text_field_embedder: {
        token_embedders: { tokens: { type: 'embedding', embedding_dim: word_dim } }
                         + (if elmo == null then {} else { elmo: elmo }),
      },
      encoder: {
        type: 'pass_through',
        input_dim: word_dim + (if elmo == null then 0 else elmo.output_dim),
      },
      calculate_span_f1: true,
      label_encoding: 'BIO',
    },
    data_loader: { batch_size: 16, shuffle: true },
    trainer: {
      // AllenNLP's console logger without its dump of the first batch's character ids.
      enable_default_callbacks: false,
      callbacks: [{ type: 'console_logger', should_log_inputs: false }],
      num_epochs: 10,
      optimizer: { type: 'adam', lr: 0.01 },
      validation_metric: '+f1-measure-overall',
    },
  },
}
