"""
ELMo's context-free token encoder: character embeddings, a character CNN with max-pooling,
highway layers and a linear projection to the LSTM input size.
"""
from typing import Mapping, Optional, Tuple, Union

import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.highway import Highway

from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.kernels.recorded_products import FORWARD, product_nt, product_operand
from elmo_plugin.modules.distinct_rows import distinct_rows
from elmo_plugin.modules.token_layer import ElmoTokenEncoder
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import NUM_CHARACTERS_IN_FILE, ElmoOptions
from elmo_plugin.weights.parameter_mapping import Arrays, copy_into_parameters, parameter_array

_ACTIVATIONS = {"relu": torch.nn.functional.relu, "tanh": torch.tanh}
# Tokens per pass through the encoder without gradients: the CNN's outputs (filters x positions
# per token, hundreds of kB per token for the published models' widest filters) would otherwise
# dominate peak memory.
TOKENS_PER_CNN_CHUNK = 512
# In training the CNN works a few tokens at a time by itself (`ConvolveAndMaxPool`), so these
# chunks only cut the highway and projection products; each chunk makes a whole weight gradient
# of its own (2 n_filters x n_filters per highway layer) that is then summed. Over long runs the
# C heap grew least with this size of those tried (BENCHMARKS.md, "Training memory").
TOKENS_PER_TRAINING_CHUNK = 1024
# Training: the bytes of one chunk's products, read by the max-pooling while they are still in
# the caches (a few MB: L2 and L3). On a GPU the host launching each chunk's kernels sets the
# pace instead, so its chunks are large (BENCHMARKS.md, "On an H200: training").
_CNN_TRAINING_CHUNK_BYTES = 4 * 2**20
_CNN_TRAINING_CHUNK_BYTES_ON_A_GPU = 256 * 2**20
# Up to this many characters in the table, a GPU's backward pass bins every character instead of
# finding those that occur (a sort, and the host waiting for its result's size); ELMo's table
# has 262. ELMoForManyLangs' tables have thousands: those bins would be larger than the work.
_EVERY_CHARACTER_BINNED_ON_A_GPU = 1024


def _training_chunk_bytes(device: torch.device) -> int:
    return _CNN_TRAINING_CHUNK_BYTES if device.type == "cpu" else _CNN_TRAINING_CHUNK_BYTES_ON_A_GPU


def _bins_every_character(device: torch.device, table_rows: int) -> bool:
    return device.type != "cpu" and table_rows <= _EVERY_CHARACTER_BINNED_ON_A_GPU


def _maxima_and_windows(products: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    `(tokens, windows, out_channels)` -> each filter's maximum over the windows and the window
    that reaches it (the first of tied ones), both `(tokens, out_channels)`. Read as a
    channels-last image `(tokens, out_channels, 1, windows)`, where PyTorch's max-pooling runs
    along the channels and finds maxima and positions in one pass: several times faster than
    `amax` over this middle axis followed by a comparison (BENCHMARKS.md).
    """
    num_tokens, num_windows, out_channels = products.shape
    image = products.reshape(num_tokens, 1, num_windows, out_channels).permute(0, 3, 1, 2)
    maxima, windows = torch.nn.functional.max_pool2d(image, kernel_size=(1, num_windows), return_indices=True)
    return maxima.reshape(num_tokens, out_channels), windows.reshape(num_tokens, out_channels)


class ConvolveAndMaxPool(torch.autograd.Function):
    """
    The char CNN's training path for one filter width: character ids through the character
    table, the filters at every window, the maximum over windows (without the filters' bias,
    which is the same at every window). `(tokens, characters)` ids, `(num_characters,
    char_dim)` table, `(out_channels, char_dim, width)` filters -> `(tokens, out_channels)`.

    The backward pass uses what a maximum's gradient is: each filter's gradient reaches one
    window per token, and a window is `width` characters. So the gradient of each (offset in
    the window, filter) pair is gathered per character into `(width, out_channels,
    characters)` bins, and both parameter gradients are small products of those bins with the
    table and the filters. The dense backward (AllenNLP's, and `torch.nn.Conv1d`'s) multiplies a
    `(tokens, windows, out_channels)` gradient that is zero except at the maxima, twice the
    forward product's work for the same sums.

    bilm-tf (TensorFlow's `reduce_max`) splits a maximum's gradient among the windows that tie
    for it, `torch.max` (AllenNLP) gives it to one; ties come from identical windows (the
    padding after a short token), which hold the same characters, so both give the same
    parameter gradients as the one window taken here. (Products rounded to bfloat16 can also
    tie between different windows; the last of them takes the gradient, one of the maximum's
    subgradients.)
    """

    @staticmethod
    def forward(ctx, character_ids: torch.Tensor, table: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
        num_tokens, num_characters = character_ids.shape
        out_channels, char_dim, width = filters.shape
        num_windows = num_characters - width + 1
        # As the products read them (bfloat16 products: rounded once here, not per chunk; the
        # rows then come out of the table already rounded)
        flat_filters = product_operand(filters.reshape(out_channels, -1))
        table_rows = product_operand(table)
        code_dtype = torch.uint8 if num_windows <= 256 else torch.int32
        # A few tokens at a time: the products of all tokens at once would be the step's largest
        # tensor (the widest filters' are ~180 kB per token in float32).
        chunk_bytes = _training_chunk_bytes(character_ids.device)
        chunk = max(1, chunk_bytes // (num_windows * out_channels * flat_filters.element_size()))
        maxima, windows = [], []
        for ids in character_ids.split(chunk):
            # (tokens, windows, char_dim x width), the windows from the last: the layout of the
            # flattened filters, in the order where max-pooling's first of tied maxima is the
            # last window (the rule above)
            rows = (
                torch.nn.functional.embedding(ids, table_rows)
                .unfold(1, width, 1)
                .flip(1)
                .reshape(ids.size(0) * num_windows, char_dim * width)
            )
            # (tokens x windows, out_channels); bfloat16 products left in bfloat16: converting
            # them changes neither the maxima nor where they are.
            products = product_nt(Role.CHAR_CNN, FORWARD, rows, flat_filters, float32_result=False)
            chunk_maxima, windows_from_last = _maxima_and_windows(products.view(ids.size(0), num_windows, out_channels))
            maxima.append(chunk_maxima)
            windows.append((num_windows - 1 - windows_from_last).to(code_dtype))
        ctx.save_for_backward(character_ids, table, filters, torch.cat(windows))
        return torch.cat(maxima).to(filters.dtype)

    @staticmethod
    def backward(ctx, gradient: torch.Tensor):
        character_ids, table, filters, windows = ctx.saved_tensors
        out_channels, char_dim, width = filters.shape
        # Bins for the characters that occur here only (ELMoForManyLangs' tables have
        # thousands of rows), or on a GPU for every character of a small table.
        occurring: Optional[torch.Tensor] = None
        if _bins_every_character(character_ids.device, table.size(0)):
            local_ids, num_binned = character_ids.long(), table.size(0)
        else:
            occurring, local_ids = torch.unique(character_ids, return_inverse=True)
            num_binned = occurring.numel()
        # (tokens, windows, width): the characters of every window
        window_characters = local_ids.unfold(1, width, 1)
        maximum_windows = windows.long()
        # bins[j, a, f]: the gradient of filter f's maxima whose window holds character a at
        # offset j. Scattered along the tokens, in the layout the gradient and the windows
        # already have (along the filters, it took twice as long).
        bins = gradient.new_zeros(width, num_binned, out_channels)
        for offset in range(width):
            # (tokens, out_channels): the character at `offset` in each maximum's window
            characters = window_characters[:, :, offset].gather(1, maximum_windows)
            bins[offset].scatter_add_(0, characters, gradient)
        table_gradient = filters_gradient = None
        if ctx.needs_input_grad[2]:
            # (width, out, char_dim) -> (out, char_dim, width)
            binned_rows = table if occurring is None else table.index_select(0, occurring)
            filters_gradient = torch.matmul(bins.transpose(1, 2), binned_rows).permute(1, 2, 0)
        if ctx.needs_input_grad[1]:
            # (occurring, width x out) x (width x out, char_dim)
            binned_gradient = bins.transpose(0, 1).reshape(num_binned, -1) @ filters.permute(
                2, 0, 1
            ).reshape(width * out_channels, char_dim)
            table_gradient = (
                binned_gradient
                if occurring is None
                else table.new_zeros(table.shape).index_copy_(0, occurring, binned_gradient)
            )
        return None, table_gradient, filters_gradient


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
        distinct_ids, copies = distinct_rows(character_ids)
        if distinct_ids.size(0) == character_ids.size(0):
            return self._embed_distinct_tokens(character_ids)
        return self._embed_distinct_tokens(distinct_ids).index_select(0, copies)

    def _embed_distinct_tokens(self, character_ids: torch.Tensor) -> torch.Tensor:
        tokens_per_chunk = self._tokens_per_chunk()
        if character_ids.size(0) > tokens_per_chunk:
            return torch.cat(
                [self._embed_distinct_tokens(chunk) for chunk in character_ids.split(tokens_per_chunk)]
            )
        # (tokens, projection_dim)
        return self._project(self._character_features(character_ids))

    def _trains_cnn(self) -> bool:
        """Whether this pass computes gradients for the character table or the filters."""
        return torch.is_grad_enabled() and any(
            parameter.requires_grad
            for parameter in [self._char_embedding_weights]
            + [p for convolution in self._convolutions for p in convolution.parameters()]
        )

    def _tokens_per_chunk(self) -> int:
        return TOKENS_PER_TRAINING_CHUNK if self._trains_cnn() else TOKENS_PER_CNN_CHUNK

    def _character_features(self, character_ids: torch.Tensor) -> torch.Tensor:
        """`(tokens, characters)` ids into the character table -> `(tokens, n_filters)`: the
        CNN's max-pooled filters through the highway layers."""
        if self._trains_cnn():
            # (tokens, out_channels) per filter width
            maxima = [
                ConvolveAndMaxPool.apply(character_ids, self._char_embedding_weights, convolution.weight)
                + convolution.bias
                for convolution in self._convolutions
            ]
        else:
            # (tokens, characters, char_dim)
            characters = torch.nn.functional.embedding(character_ids, self._char_embedding_weights)
            maxima = [
                self._convolve_and_max_pool(characters, convolution) for convolution in self._convolutions
            ]
        # (tokens, n_filters): per filter width, the activation of the max over positions
        pooled = torch.cat([self._activation(filter_maxima) for filter_maxima in maxima], dim=-1)
        return self._apply_highways(pooled)

    def _convolve_and_max_pool(
        self, characters: torch.Tensor, convolution: torch.nn.Conv1d
    ) -> torch.Tensor:
        """
        Inference: `convolution` over `(tokens, characters, char_dim)`, then the maximum over
        positions: `(tokens, out_channels)`. One matrix product of every window of `width`
        characters (a strided view, copied once into rows) with the flattened filters, rather
        than `Conv1d.forward`, whose cuDNN algorithms took far more time and workspace for
        these shapes on a GPU (BENCHMARKS.md). The same sums in another order: the results
        differ from a convolution by float32 rounding. (Training: `ConvolveAndMaxPool`.)
        """
        num_tokens, _, char_dim = characters.shape
        width = convolution.kernel_size[0]
        # (tokens, positions, char_dim, width): the layout of the filters' (char_dim, width)
        windows = characters.unfold(1, width, 1)
        # (tokens, positions, char_dim x width)
        rows = windows.reshape(num_tokens, windows.size(1), char_dim * width)
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
