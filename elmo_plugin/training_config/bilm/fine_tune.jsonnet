// Fine-tune an existing biLM (a published ELMo, or one exported with `allennlp elmo-export`) on
// your corpus: the char CNN and LSTMs start from the files, the softmax starts fresh for the
// vocabulary built from the new corpus (published files hold no softmax). Smaller learning
// rate and fewer epochs than training from scratch. Default: the published small ELMo.
//   allennlp train training_config/bilm/fine_tune.jsonnet -s out/bilm_tuned -o '{
//     "train_data_path": "my_corpus/train.txt", "validation_data_path": "my_corpus/dev.txt"}'
// Your own biLM instead: -o '{"model.options_file": "elmo_files/options.json",
//                            "model.weight_file": "elmo_files/weights.hdf5"}'
local bilm = import 'bilm.libsonnet';
local published_small = 'https://allennlp.s3.amazonaws.com/models/elmo/2x1024_128_2048cnn_1xhighway/elmo_2x1024_128_2048cnn_1xhighway';

bilm.config(
  model={
    options_file: published_small + '_options.json',
    weight_file: published_small + '_weights.hdf5',
  },
  train_data_path='corpus/train.txt',
  validation_data_path='corpus/dev.txt',
  vocabulary={ min_count: 2 },
  num_streams=32,
  lr=0.05,
  num_epochs=3,
)
