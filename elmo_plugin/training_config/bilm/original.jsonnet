// The original ELMo architecture of the paper (2x4096_512_2048cnn_2xhighway: 2 layers, 4096-cell
// LSTMs projected to 512, the 2048-filter char CNN, 2 highway layers), bilm-tf's recipe.
// The paper trained it for 10 epochs on the 1B Word Benchmark (about 2 weeks on 3 GPUs):
//   allennlp train training_config/bilm/original.jsonnet -s out/bilm_original -o '{
//     "train_data_path": "1b/training-monolingual.tokenized.shuffled/news.en-*",
//     "validation_data_path": "1b/heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050",
//     "vocabulary.vocab_file": "1b/vocab-2016-09-10.txt"}'
// Several GPUs: add -o '{"distributed": {"cuda_devices": [0, 1, 2]}}' (batch size is per GPU).
local bilm = import 'bilm.libsonnet';

bilm.config(
  model={ options: bilm.options(bilm.published_filters, 2, 4096, 512) },
  train_data_path='corpus/train/*.txt',
  validation_data_path='corpus/heldout.txt',
  vocabulary={ vocab_file: 'corpus/vocab.txt' },
)
