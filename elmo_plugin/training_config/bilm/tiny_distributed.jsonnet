// tiny.jsonnet on two CPU worker processes with AllenNLP's distributed training (torch DDP,
// gloo backend). Each worker reads its own share of the sentences (the reader shards them)
// and packs them into its own num_streams streams. On GPUs: cuda_devices: [0, 1].
//   allennlp train training_config/bilm/tiny_distributed.jsonnet -s /tmp/bilm_ddp
// AllenNLP saves checkpoints by batches, not seconds, in distributed training.
(import 'tiny.jsonnet') + {
  distributed: { cuda_devices: [-1, -1] },
  trainer+: { checkpointer+: { save_every_num_seconds: null, save_every_num_batches: 1000 } },
}
