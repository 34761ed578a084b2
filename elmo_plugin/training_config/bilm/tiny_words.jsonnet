// tiny.jsonnet's biLM with word input instead of the char CNN, its input embedding tied to the
// softmax (bilm-tf's share_embedding_softmax). Exported with `allennlp elmo-export` like any
// biLM; the weight file then holds the embedding and the vocabulary (see weights/layout.py).
//   allennlp train training_config/bilm/tiny_words.jsonnet -s /tmp/bilm_tiny_words
local bilm = import 'bilm.libsonnet';
local tiny = import 'tiny.jsonnet';

tiny {
  model+: { options: bilm.word_options(64, 16, share_embedding_softmax=true) },
}
