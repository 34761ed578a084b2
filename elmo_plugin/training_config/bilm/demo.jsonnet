// The biLM of `make demo`: a small architecture (the published one scaled down to train in a
// few minutes on 2 CPU cores) on the demo's generated corpus. `elmo_plugin.demo.run` sets the
// paths through -o overrides; by hand, after a `make demo`:
//   allennlp train training_config/bilm/demo.jsonnet -s out -o '{
//     "train_data_path": "demo_output/corpus/train.txt",
//     "validation_data_path": "demo_output/corpus/heldout.txt"}'
local bilm = import 'bilm.libsonnet';

bilm.config(
  model={ options: bilm.options([[1, 16], [2, 16], [3, 32], [4, 64], [5, 128]], 1, 256, 64) },
  train_data_path='demo_output/corpus/train.txt',
  validation_data_path='demo_output/corpus/heldout.txt',
  vocabulary={ min_count: 1 },
  window_size=20,
  num_streams=32,
  num_samples=64,
  optimizer={ type: 'adam', lr: 0.004 },
  num_epochs=3,
)
