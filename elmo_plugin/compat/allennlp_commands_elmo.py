"""
AllenNLP 0.9's `allennlp.commands.elmo`, which AllenNLP 1.0 removed and code written for 0.9
(flair's `ELMoEmbeddings`, many research repositories) still imports:

    from allennlp.commands.elmo import ElmoEmbedder

Served under that name by `elmo_plugin_import_hook`. `ElmoEmbedder` here is this package's,
with 0.9's defaults: the published original ELMo, and the LSTM state carried from batch to
batch (0.9's vectors, so that stored vectors stay comparable). `stateful=False` gives
vectors that depend on each sentence alone.
"""
from elmo_plugin.data.token_indexer import ElmoTokenCharactersIndexer
from elmo_plugin.inference import elmo_embedder
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.weights import pretrained

DEFAULT_OPTIONS_FILE = pretrained.DEFAULT.options_file
DEFAULT_WEIGHT_FILE = pretrained.DEFAULT.weight_file
DEFAULT_BATCH_SIZE = elmo_embedder.DEFAULT_BATCH_SIZE

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "ElmoEmbedder"]


class ElmoEmbedder(elmo_embedder.ElmoEmbedder):
    """
    AllenNLP 0.9's `ElmoEmbedder(options_file, weight_file, cuda_device)`: every method and
    attribute 0.9 client code uses (`embed_sentence`, `embed_batch`, `embed_sentences`,
    `embed_file`, `batch_to_embeddings`, `cuda_device`, `elmo_bilm`, `indexer`,
    `elmo_bilm._elmo_lstm._states`).

    # Parameters

    options_file : `str`, optional
        The biLM's options; defaults to the published original ELMo.
    weight_file : `str`, optional
        The biLM's weights; defaults to the published original ELMo.
    cuda_device : `int`, optional (default = `-1`)
        GPU to run on; -1 for the CPU.
    stateful : `bool`, optional (default = `True`)
        0.9's carried state; `False` for vectors that depend on each sentence alone.
    precision : `str`, optional (default = `"float32"`)
        See `ElmoSettings`.
    """

    def __init__(
        self,
        options_file: str = DEFAULT_OPTIONS_FILE,
        weight_file: str = DEFAULT_WEIGHT_FILE,
        cuda_device: int = -1,
        stateful: bool = True,
        precision: str = ElmoSettings.precision,
    ) -> None:
        super().__init__(options_file, weight_file, cuda_device, stateful=stateful, precision=precision)
        self.indexer = ElmoTokenCharactersIndexer()
