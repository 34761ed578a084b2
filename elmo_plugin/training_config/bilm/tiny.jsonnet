// A CI-sized biLM (the published architecture scaled down) on the tiny bilm-tf fixture corpus,
// trained as bilm-tf trains: packed windows, carried state, sampled softmax. From the repo root:
//   allennlp train training_config/bilm/tiny.jsonnet -s /tmp/bilm_tiny
// Another corpus (one sentence per line; a glob of shards works too) and vocabulary:
//   allennlp train training_config/bilm/tiny.jsonnet -s out -o '{"train_data_path": "corpus/*.txt",
//     "validation_data_path": "heldout.txt", "vocabulary.vocab_file": "vocab.txt"}'
local bilm = import 'bilm.libsonnet';

bilm.config(
  model={ options: bilm.options([[1, 8], [2, 8], [3, 16], [4, 16]], 1, 64, 16, char_dim=8) },
  train_data_path='../shared/fixtures/bilm_train/data.txt',
  validation_data_path='../shared/fixtures/bilm_train/data.txt',
  vocabulary={ vocab_file: '../shared/fixtures/bilm_train/vocab.txt' },
  window_size=10,
  num_streams=4,
  num_samples=16,
  // Adam: on 4 sentences bilm-tf's Adagrad needs ~60 epochs to reach what this reaches in 25.
  optimizer={ type: 'adam', lr: 0.01 },
  num_epochs=25,
)
