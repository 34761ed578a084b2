"""
ELMo's context-free token encoder: character embeddings, a character CNN with max-pooling,
highway layers and a linear projection to the LSTM input size.
"""
from typing import Mapping, Optional, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.highway import Highway

from elmo_plugin.kernels.products import Kernels, Role, weight_matrix
from elmo_plugin.modules.token_encoder import ElmoTokenEncoder
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import NUM_CHARACTERS_IN_FILE, ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, copy_into_parameters, parameter_array

_ACTIVATIONS = {"relu": torch.nn.functional.relu, "tanh": torch.tanh}
# Tokens per pass through the CNN: its outputs (filters x positions per token, hundreds of kB
# per token for the published models' widest filters) would otherwise dominate peak memory.
TOKENS_PER_CNN_CHUNK = 512


class MaxOverPositions(torch.autograd.Function):
    """
    The maximum over dimension 1 of `(tokens, positions, filters)` products, with bilm-tf's
    gradient (TensorFlow's `reduce_max`): each maximum's gradient split equally among the
    positions that reach it. (Ties come from identical windows, such as the padding after
    short tokens, so every parameter's gradient is the same as with one chosen position, as
    `torch.max` and AllenNLP's encoder do: identical windows hold the same characters.) `torch.max` with positions takes several times longer
    over this middle axis than `amax` and a comparison.
    """

    @staticmethod
    def forward(ctx, products: torch.Tensor) -> torch.Tensor:
        # (tokens, filters)
        maxima = products.amax(dim=1)
        # (tokens, positions, filters), a byte each
        ctx.save_for_backward(products == maxima.unsqueeze(1))
        return maxima

    @staticmethod
    def backward(ctx, gradient: torch.Tensor) -> torch.Tensor:
        (reaches_maximum,) = ctx.saved_tensors
        # (tokens, filters): how many positions share each maximum, counted in bytes where
        # they fit (far faster than a boolean sum)
        count_dtype = torch.uint8 if reaches_maximum.size(1) < 256 else torch.int32
        ties = reaches_maximum.view(torch.uint8).sum(dim=1, dtype=count_dtype)
        share = (gradient / ties).unsqueeze(1)
        return torch.where(reaches_maximum, share, 0.0)


class ElmoCharacterEncoder(ElmoTokenEncoder):
    """
    Computes a context-free representation of every token from its character ids, after adding
    the `<S>` and `</S>` boundary tokens. Parameters start as bilm-tf initialises a biLM for
    training (`reset_parameters`); `ElmoBiLm` loads them from a weight file.

    # Parameters

    options : `Union[ElmoOptions, str]`
        The biLM architecture, or the path or URL of its options file (AllenNLP's
        `_ElmoCharacterEncoder(options_file, weight_file)`).
    weight_file : `str`, optional
        Weights to load (the token layer's part of any weight format); `None` keeps the
        initialisation.
    requires_grad : `bool`, optional (default = `False`)
        Whether the parameters are trained.
    kernels : `Kernels`, optional
        Computes the CNN, highway and projection products (the biLM shares its own).
    """

    def __init__(
        self,
        options: Union[ElmoOptions, str],
        weight_file: Optional[str] = None,
        requires_grad: bool = False,
        kernels: Optional[Kernels] = None,
    ) -> None:
        super().__init__()
        weights = None
        if weight_file is not None:
            weights = read_bilm_weights(options, weight_file)
            options = weights.options
        elif not isinstance(options, ElmoOptions):
            options = ElmoOptions.from_file(options)
        if options.word_inputs:
            raise ConfigurationError(
                "ElmoCharacterEncoder needs a character-input biLM; these options have no 'char_cnn'."
            )
        self.options = options
        self.kernels = kernels or Kernels()
        self._activation = _ACTIVATIONS[options.activation]
        self._char_embedding_weights = torch.nn.Parameter(
            torch.empty(NUM_CHARACTERS_IN_FILE + 1, options.char_embedding_dim).normal_()
        )
        self._convolutions = []
        for i, (width, num) in enumerate(options.filters):
            convolution = torch.nn.Conv1d(options.char_embedding_dim, num, kernel_size=width)
            self.add_module(f"char_conv_{i}", convolution)
            self._convolutions.append(convolution)
        # bilm-tf's highway transform is always relu, whatever the CNN activation. (AllenNLP's
        # module holds the parameters; `_highways_and_projection` computes its formula.)
        self._highways = Highway(
            options.n_filters, options.n_highway, activation=torch.nn.functional.relu
        )
        self._projection = torch.nn.Linear(options.token_features, options.projection_dim)
        self.reset_parameters()
        if weights is not None:
            copy_into_parameters(self, self.parameters_from_arrays(weights.arrays))
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

    def get_output_dim(self) -> int:
        return self.options.projection_dim

    def embed_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        """Maps `(num_tokens, 50)` character ids to `(num_tokens, projection_dim)`."""
        # A token's vector depends on its characters alone, and text repeats itself: a batch of
        # sentences holds far fewer distinct tokens than token positions (with padding and
        # boundaries). Each distinct token goes through the CNN once; autograd sums the
        # gradients of its copies.
        distinct_ids, copies = torch.unique(character_ids, dim=0, return_inverse=True)
        if distinct_ids.size(0) == character_ids.size(0):
            return self._embed_distinct_tokens(character_ids)
        return self._embed_distinct_tokens(distinct_ids).index_select(0, copies)

    def _embed_distinct_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        if character_ids.size(0) > TOKENS_PER_CNN_CHUNK:
            return torch.cat(
                [
                    self._embed_distinct_tokens(chunk)
                    for chunk in character_ids.split(TOKENS_PER_CNN_CHUNK)
                ]
            )
        # (tokens, projection_dim)
        return self._project(self._character_features(character_ids))

    def _character_features(self, character_ids: torch.Tensor) -> torch.Tensor:
        """`(tokens, characters)` ids into the character table -> `(tokens, n_filters)`: the
        CNN's max-pooled filters through the highway layers."""
        # (tokens, characters, char_dim)
        characters = torch.nn.functional.embedding(character_ids, self._char_embedding_weights)
        # (tokens, n_filters): per filter width, the activation of the max over positions
        pooled = torch.cat(
            [
                self._activation(self._convolve_and_max_pool(characters, convolution))
                for convolution in self._convolutions
            ],
            dim=-1,
        )
        return self._apply_highways(pooled)

    def _convolve_and_max_pool(
        self, characters: torch.Tensor, convolution: torch.nn.Conv1d
    ) -> torch.Tensor:
        """
        `convolution` over `(tokens, characters, char_dim)`, then the maximum over positions:
        `(tokens, out_channels)`. One matrix product of every window of `width` characters (a
        strided view, copied once into rows) with the flattened filters, rather than
        `Conv1d.forward`, whose cuDNN algorithms took far more time and workspace for these
        shapes on a GPU (BENCHMARKS.md). The same sums in another order: the results differ
        from a convolution by float32 rounding.
        """
        num_tokens, _, char_dim = characters.shape
        width = convolution.kernel_size[0]
        # (tokens, positions, char_dim, width): the layout of the filters' (char_dim, width)
        windows = characters.unfold(1, width, 1)
        # (tokens, positions, char_dim x width)
        rows = windows.reshape(num_tokens, windows.size(1), char_dim * width)
        if torch.is_grad_enabled() and any(
            t.requires_grad for t in (rows, convolution.weight, convolution.bias)
        ):
            # A filter's bias is the same at every position, so it is added after the maximum
            # (the same maxima up to float rounding) to one value per filter, not to every
            # window. Plain products: oneDNN's (`Kernels`) have no gradient.
            # (tokens, positions, out_channels)
            products = torch.nn.functional.linear(rows, weight_matrix(convolution))
            return MaxOverPositions.apply(products) + convolution.bias
        product = self.kernels.product(Role.CHAR_CNN, convolution)
        # The maxima without their positions: several times faster over this middle axis.
        return product(rows).amax(dim=1)

    def _apply_highways(self, pooled: torch.Tensor) -> torch.Tensor:
        # AllenNLP's Highway: y = g * x + (1 - g) * relu(A x), with g = sigmoid(B x).
        current = pooled
        for layer in self._highways._layers:
            nonlinear_part, gate = self.kernels.product(Role.HIGHWAY, layer)(current).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            current = gate * current + (1 - gate) * torch.nn.functional.relu(nonlinear_part)
        return current

    def _project(self, features: torch.Tensor) -> torch.Tensor:
        """`(tokens, token_features)` -> `(tokens, projection_dim)`, the LSTM's input."""
        return self.kernels.product(Role.CHAR_PROJECTION, self._projection)(features)

    def parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """
        The parameters from the layout's character datasets: a zero padding row before the
        character table, TF's conv2d kernels as `Conv1d` weights, the highway's transform and
        (negated) carry halves stacked.
        """
        options = self.options
        char_table = numpy.zeros(
            (NUM_CHARACTERS_IN_FILE + 1, options.char_embedding_dim), dtype=numpy.float32
        )
        char_table[1:] = arrays[layout.CHAR_EMBEDDING]
        values = {"_char_embedding_weights": char_table}
        values.update(self._cnn_parameters_from_arrays(arrays))
        return values

    def _cnn_parameters_from_arrays(self, arrays: Mapping[str, numpy.ndarray]) -> Arrays:
        """The filters, highway layers and projection (what every char CNN encoder has)."""
        values = {}
        for i in range(len(self.options.filters)):
            values[f"char_conv_{i}.weight"] = layout.conv_weight(arrays[layout.cnn_weight(i)])
            values[f"char_conv_{i}.bias"] = arrays[layout.cnn_bias(i)]
        for k in range(self.options.n_highway):
            weight, bias = layout.highway_parameters(arrays, k)
            values[f"_highways._layers.{k}.weight"] = weight
            values[f"_highways._layers.{k}.bias"] = bias
        values["_projection.weight"] = arrays[layout.PROJECTION_WEIGHT].T
        values["_projection.bias"] = arrays[layout.PROJECTION_BIAS]
        return values

    def arrays_from_parameters(self) -> Arrays:
        """The layout's character datasets (inverse of `parameters_from_arrays`)."""
        arrays = {layout.CHAR_EMBEDDING: parameter_array(self._char_embedding_weights)[1:]}
        arrays.update(self._cnn_arrays_from_parameters())
        return arrays

    def _cnn_arrays_from_parameters(self) -> Arrays:
        arrays = {}
        for i, convolution in enumerate(self._convolutions):
            arrays[layout.cnn_weight(i)] = layout.cnn_kernel(parameter_array(convolution.weight))
            arrays[layout.cnn_bias(i)] = parameter_array(convolution.bias)
        for k, highway_layer in enumerate(self._highways._layers):
            arrays.update(
                layout.highway_datasets(k, parameter_array(highway_layer.weight), parameter_array(highway_layer.bias))
            )
        arrays[layout.PROJECTION_WEIGHT] = parameter_array(self._projection.weight).T
        arrays[layout.PROJECTION_BIAS] = parameter_array(self._projection.bias)
        return arrays
