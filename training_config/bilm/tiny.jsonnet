// A CI-sized biLM (the architecture of the published ones, scaled down) trained on the tiny
// bilm-tf fixture corpus with packed windows and carried state, as bilm-tf trains.
//   allennlp train training_config/bilm/tiny.jsonnet -s /tmp/bilm_tiny
// Your own corpus (one sentence per line; a glob of shards works too):
//   allennlp train training_config/bilm/tiny.jsonnet -s out \
//     -o '{"train_data_path": "corpus/*.txt", "vocabulary": {"vocab_file": "vocab.txt"}}'
local window_size = 10;  // predictions per window (bilm-tf: unroll_steps)
local num_streams = 4;  // rows per batch; the data loader's batch_size must equal it

{
  dataset_reader: {
    type: 'elmo_bilm_corpus',
    window_size: window_size,
    num_streams: num_streams,
    shuffle: true,
  },
  validation_dataset_reader: self.dataset_reader + { shuffle: false },
  train_data_path: '../shared/fixtures/bilm_train/data.txt',
  validation_data_path: '../shared/fixtures/bilm_train/data.txt',
  // A bilm-tf vocab file (<S>, </S>, <UNK> first); or {type: 'bilm', min_count: 1} to build
  // it from the training data.
  vocabulary: {
    type: 'bilm',
    vocab_file: '../shared/fixtures/bilm_train/vocab.txt',
  },
  model: {
    type: 'elmo_bilm',
    // The options-JSON format of the published ELMo files: this is what export writes.
    options: {
      char_cnn: {
        activation: 'relu',
        filters: [[1, 8], [2, 8], [3, 16], [4, 16]],
        n_highway: 1,
        embedding: { dim: 8 },
        n_characters: 262,
        max_characters_per_token: 50,
      },
      lstm: {
        dim: 64,
        projection_dim: 16,
        n_layers: 2,
        cell_clip: 3,
        proj_clip: 3,
        use_skip_connections: true,
      },
    },
    dropout: 0.1,
    num_samples: 16,
  },
  data_loader: { batch_size: num_streams, shuffle: false },
  trainer: {
    // bilm-tf's optimiser and global gradient-norm clipping.
    optimizer: { type: 'adagrad', lr: 0.2, initial_accumulator_value: 1.0 },
    grad_norm: 10.0,
    num_epochs: 20,
    validation_metric: '-perplexity',
    cuda_device: -1,
  },
}
