// The published "small" ELMo architecture (2x1024_128_2048cnn_1xhighway: 2 layers, 1024-cell
// LSTMs projected to 128, the 2048-filter char CNN, 1 highway layer), bilm-tf's recipe.
// Point it at your corpus (one tokenized sentence per line; shards as a glob) and vocabulary:
//   allennlp train training_config/bilm/small.jsonnet -s out/bilm_small -o '{
//     "train_data_path": "corpus/train/*.txt", "validation_data_path": "corpus/heldout.txt",
//     "vocabulary.vocab_file": "corpus/vocab.txt"}'
// (or "vocabulary": {"type": "bilm", "min_count": 3} to build it from the corpus).
// Then: allennlp elmo-export out/bilm_small elmo_small/
local bilm = import 'bilm.libsonnet';

bilm.config(
  model={ options: bilm.options(bilm.published_filters, 1, 1024, 128) },
  train_data_path='corpus/train/*.txt',
  validation_data_path='corpus/heldout.txt',
  vocabulary={ vocab_file: 'corpus/vocab.txt' },
)
