// ELMo as the task configs use it, with the paper's recommendations (Peters et al. 2018,
// sections 3.3 and 5.1): dropout 0.5 on the ELMo vectors, no layer normalisation of the biLM
// layers, and L2 (alpha 0.001) on the scalar-mix weights, pulling the mix towards an average
// of the layers.
//
// The biLM comes from the environment, which AllenNLP passes to Jsonnet:
//   ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE  paths or URLs (cached_path)
//   ELMO_DIM                             the ELMo vector size (2 x lstm.projection_dim)
// Importing elmo_plugin fills them in when they are unset: none set gives the published
// original ELMo (1024 dimensions); ELMO_DIM is read from a local or published options file.
{
  options_file: std.extVar('ELMO_OPTIONS_FILE'),
  weight_file: std.extVar('ELMO_WEIGHT_FILE'),
  dim: std.parseInt(std.extVar('ELMO_DIM')),

  // The `elmo_characters` indexer, under the key `elmo` in a reader's token_indexers.
  indexer: { type: 'elmo_characters' },

  // The `elmo_token_embedder` for the same key. `requires_grad: false` keeps the biLM frozen;
  // its scalar mix (and gamma) are trained either way.
  embedder(requires_grad=false):: {
    type: 'elmo_token_embedder',
    options_file: $.options_file,
    weight_file: $.weight_file,
    do_layer_norm: false,
    dropout: 0.5,
    requires_grad: requires_grad,
  },

  // A trainer's logging: AllenNLP's console logger, without its dump of the first batch's
  // input tensors (ELMo's character ids, thousands of numbers), in place of the default one.
  trainer_logging: {
    enable_default_callbacks: false,
    callbacks: [{ type: 'console_logger', should_log_inputs: false }],
  },

  // A model's `regularizer`: L2 on the scalar-mix weights only (their names end in
  // `scalar_parameters.<layer>`).
  regularizer: {
    regexes: [['.*scalar_parameters.*', { type: 'l2', alpha: 0.001 }]],
  },
}
