"""
ELMo's context-free token encoder: character embeddings, a character CNN with max-pooling,
highway layers and a linear projection to the LSTM input size.
"""
import functools
from typing import List, Optional

import torch
from allennlp.modules.highway import Highway

from elmo_plugin.modules.cpu_linear import linear
from elmo_plugin.modules.reduced_precision import FLOAT32, PackedLinear, packed
from elmo_plugin.modules.token_encoder import ElmoTokenEncoder
from elmo_plugin.weights.options import NUM_CHARACTERS_IN_FILE, ElmoOptions

_ACTIVATIONS = {"relu": torch.nn.functional.relu, "tanh": torch.tanh}
# Tokens per pass through the CNN: its outputs (filters x positions per token, 360 kB per token
# for the published models' width-7 filters alone) would otherwise dominate peak memory.
_TOKENS_PER_CNN_CHUNK = 512


class ElmoCharacterEncoder(ElmoTokenEncoder):
    """
    Computes a context-free representation of every token from its character ids, after adding
    the `<S>` and `</S>` boundary tokens. Parameters start as bilm-tf initialises a biLM for
    training (`reset_parameters`); `ElmoBiLm` loads them from a weight file.

    # Parameters

    options : `ElmoOptions`
        The biLM architecture.
    requires_grad : `bool`, optional (default = `False`)
        Whether the parameters are trained.
    """

    def __init__(self, options: ElmoOptions, requires_grad: bool = False) -> None:
        super().__init__()
        self.options = options
        self._activation = _ACTIVATIONS[options.activation]
        self._char_embedding_weights = torch.nn.Parameter(
            torch.empty(NUM_CHARACTERS_IN_FILE + 1, options.char_embedding_dim).normal_()
        )
        self._convolutions = []
        for i, (width, num) in enumerate(options.filters):
            convolution = torch.nn.Conv1d(options.char_embedding_dim, num, kernel_size=width)
            self.add_module(f"char_conv_{i}", convolution)
            self._convolutions.append(convolution)
        # bilm-tf's highway transform is always relu, whatever the CNN activation.
        self._highways = Highway(
            options.n_filters, options.n_highway, activation=torch.nn.functional.relu
        )
        self._projection = torch.nn.Linear(options.n_filters, options.projection_dim)
        self.reset_parameters()
        # Reduced-precision copies of the highway and projection products (`set_precision`).
        self._packed_highways: List[PackedLinear] = []
        self._packed_projection: Optional[PackedLinear] = None
        for parameter in self.parameters():
            parameter.requires_grad = requires_grad

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """
        bilm-tf's initialisation: character embeddings uniform in [-1, 1]; relu filters
        normal with variance 1 / (width * char_dim) (tanh filters uniform in [-0.05, 0.05]);
        highway and projection weights normal with variance 1 / fan-in; biases 0, except the
        highway gate's, which starts at -2 in bilm-tf's carry convention (+2 in AllenNLP's
        `Highway`, which gates the untransformed input): each layer starts close to identity.
        """
        options = self.options
        self._char_embedding_weights.uniform_(-1.0, 1.0)
        self._char_embedding_weights[0].fill_(0.0)  # the padding row of padded tokens
        for convolution, (width, _) in zip(self._convolutions, options.filters):
            if options.activation == "relu":
                convolution.weight.normal_(0.0, (1.0 / (width * options.char_embedding_dim)) ** 0.5)
            else:
                convolution.weight.uniform_(-0.05, 0.05)
            convolution.bias.fill_(0.0)
        n_filters = options.n_filters
        for highway_layer in self._highways._layers:
            highway_layer.weight.normal_(0.0, (1.0 / n_filters) ** 0.5)
            highway_layer.bias[:n_filters].fill_(0.0)
            highway_layer.bias[n_filters:].fill_(2.0)
        self._projection.weight.normal_(0.0, (1.0 / n_filters) ** 0.5)
        self._projection.bias.fill_(0.0)

    def set_precision(self, precision: str) -> None:
        """
        Inference with the highway and projection products in `precision` (see
        `reduced_precision`); the convolutions stay in float32.
        """
        self._packed_highways = []
        self._packed_projection = None
        if precision != FLOAT32:
            self._packed_highways = [packed(layer, precision) for layer in self._highways._layers]
            self._packed_projection = packed(self._projection, precision)

    def _highways_and_projection(self, pooled: torch.Tensor) -> torch.Tensor:
        # AllenNLP's Highway.forward, written out so that its products can be the packed
        # reduced-precision ones or `cpu_linear.linear` (the layers hold the parameters).
        highway_products = self._packed_highways or [
            functools.partial(_linear_layer, layer) for layer in self._highways._layers
        ]
        current = pooled
        for product in highway_products:
            nonlinear_part, gate = product(current).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            current = gate * current + (1 - gate) * torch.nn.functional.relu(nonlinear_part)
        if self._packed_projection is not None:
            return self._packed_projection(current)
        return self._projection(current)

    def get_output_dim(self) -> int:
        return self.options.projection_dim

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, 50)` character ids to `(num_tokens, projection_dim)`."""
        # A token's vector depends on its characters alone, and text repeats itself: a batch of
        # 64 sentences of 20-30 tokens (with padding and boundaries) holds ~2,000 tokens but
        # ~600 distinct ones. Each distinct token goes through the CNN once; autograd sums the
        # gradients of its copies.
        distinct_ids, copies = torch.unique(character_ids, dim=0, return_inverse=True)
        if distinct_ids.size(0) == character_ids.size(0):
            return self._embed_distinct_tokens(character_ids)
        return self._embed_distinct_tokens(distinct_ids).index_select(0, copies)

    def _embed_distinct_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        if character_ids.size(0) > _TOKENS_PER_CNN_CHUNK:
            return torch.cat(
                [
                    self._embed_distinct_tokens(chunk)
                    for chunk in character_ids.split(_TOKENS_PER_CNN_CHUNK)
                ]
            )
        characters = torch.nn.functional.embedding(character_ids, self._char_embedding_weights)
        pooled = [
            self._activation(_convolve_and_max_pool(characters, convolution))
            for convolution in self._convolutions
        ]
        return self._highways_and_projection(torch.cat(pooled, dim=-1))


def _convolve_and_max_pool(characters: torch.Tensor, convolution: torch.nn.Conv1d) -> torch.Tensor:
    """
    `convolution` over `(num_tokens, num_characters, char_dim)` character embeddings, then the
    maximum over positions: `(num_tokens, out_channels)`.

    Computed as one matrix product of every window of `width` characters (a strided view,
    copied once into rows) with the flattened filters, instead of `Conv1d.forward`: on a GPU,
    cuDNN's heuristics picked FFT algorithms for our chunks of tokens, 26 ms per batch of 64
    sentences on an H100 (AllenNLP's implicit-GEMM convolutions of the same batch: 1.3 ms) and
    17 GB of workspace (BENCHMARKS.md); on the CPU the product is ~1.1x faster than oneDNN's
    convolution. Same sums in another order: the results differ by float32 rounding.
    """
    num_tokens, _, char_dim = characters.shape
    width = convolution.kernel_size[0]
    # (num_tokens, positions, char_dim, width): the layout of the filters' (char_dim, width).
    windows = characters.unfold(1, width, 1)
    products = linear(
        windows.reshape(num_tokens, windows.size(1), char_dim * width),
        convolution.weight.reshape(convolution.out_channels, char_dim * width),
        convolution.bias,
    )
    return torch.max(products, dim=1)[0]


def _linear_layer(layer: torch.nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
    return linear(inputs, layer.weight, layer.bias)
