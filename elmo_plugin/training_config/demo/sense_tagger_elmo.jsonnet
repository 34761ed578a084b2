// The sense tagger with ELMo from the demo's exported biLM: frozen biLM, trainable scalar mix
// (do_layer_norm false), as the paper recommends. See sense_tagger.libsonnet.
local tagger = import 'sense_tagger.libsonnet';

tagger.config({
  type: 'elmo_token_embedder',
  options_file: std.extVar('DEMO_ELMO_OPTIONS'),
  weight_file: std.extVar('DEMO_ELMO_WEIGHTS'),
  do_layer_norm: false,
  dropout: 0.2,
  stateful: false,  // each sentence's vectors depend on that sentence only
  output_dim:: 128,  // 2 x the demo biLM's projection_dim (hidden: not an embedder argument)
})
