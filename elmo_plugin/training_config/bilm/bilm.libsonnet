// Shared pieces of the biLM training configs: `bilm.config(...)` returns a complete
// `allennlp train` config for the elmo_bilm model. bilm-tf's training recipe is the default:
// packed windows of 20 predictions with carried LSTM state, 128 streams per batch, a sampled
// softmax with 8192 negatives, dropout 0.1, Adagrad (lr 0.2, accumulators starting at 1; the
// 'fused_adagrad' optimizer: torch's fused kernel)
// and the global gradient norm clipped at 10. A checkpoint every 5 minutes within the epoch
// (written atomically), from which `allennlp train ... --recover` continues exactly; the
// 'elmo_bilm' trainer callback checks the data against the model before the first step.
{
  // The architecture, in the options-JSON format of the published ELMo files.
  options(filters, n_highway, cell_dim, projection_dim, n_layers=2, char_dim=16):: {
    char_cnn: {
      activation: 'relu',
      filters: filters,
      n_highway: n_highway,
      embedding: { dim: char_dim },
      n_characters: 262,
      max_characters_per_token: 50,
    },
    lstm: {
      dim: cell_dim,
      projection_dim: projection_dim,
      n_layers: n_layers,
      cell_clip: 3,
      proj_clip: 3,
      use_skip_connections: true,
    },
  },

  // A word-input biLM (no char CNN: a projection_dim vector per vocabulary word, bilm-tf's
  // token-input biLM), optionally tied to the softmax. Same model type, same recipe.
  word_options(cell_dim, projection_dim, n_layers=2, share_embedding_softmax=false):: {
    lstm: $.options([], 0, cell_dim, projection_dim, n_layers).lstm,
    share_embedding_softmax: share_embedding_softmax,
  },

  // The char CNN of every published ELMo (2048 filters of widths 1-7).
  published_filters:: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],

  // vocabulary: {vocab_file: ...} (bilm-tf format) or {min_count: N} (built from the data).
  // model: {options: ...} or {options_file: ..., weight_file: ...} (fine-tuning).
  config(
    model,
    train_data_path,
    validation_data_path,
    vocabulary,
    window_size=20,
    num_streams=128,
    num_samples=8192,
    dropout=0.1,
    lr=0.2,
    num_epochs=10,
    optimizer=null,  // default: bilm-tf's Adagrad with learning rate `lr` (torch's fused kernel)
    checkpoint_every_seconds=300,
  ):: {
    dataset_reader: {
      type: 'elmo_bilm_corpus',
      window_size: window_size,
      num_streams: num_streams,
      shuffle: true,
    },
    validation_dataset_reader: self.dataset_reader + { shuffle: false },
    train_data_path: train_data_path,
    validation_data_path: validation_data_path,
    vocabulary: { type: 'bilm' } + vocabulary,
    model: { type: 'elmo_bilm', dropout: dropout, num_samples: num_samples } + model,
    // Packed windows reach the model in stream order: one window per stream in each batch, no
    // shuffling. The 'bilm_windows' loader takes its batch size from its reader's num_streams,
    // for the validation data too (whose reader may have other streams). The corpus is read
    // as it is trained on, 32 batches ahead, so its size does not matter (the loader counts
    // each pass's batches first, for the progress bar's total); null reads it all first
    // (AllenNLP's instances take ~0.5 KB of memory per token).
    data_loader: { type: 'bilm_windows', max_instances_in_memory: 32 * num_streams },
    trainer: {
      optimizer: if optimizer == null
      then { type: 'fused_adagrad', lr: lr, initial_accumulator_value: 1.0 }
      else optimizer,
      grad_norm: 10.0,
      num_epochs: num_epochs,
      validation_metric: '-perplexity',
      checkpointer: { type: 'atomic', save_every_num_seconds: checkpoint_every_seconds },
      // AllenNLP's console logger without its dump of the first batch's character ids.
      enable_default_callbacks: false,
      callbacks: [{ type: 'console_logger', should_log_inputs: false }, { type: 'elmo_bilm' }],
    },
  },
}
