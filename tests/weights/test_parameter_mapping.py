"""
Every network block's mapping between its parameters and the weight layout names exactly its
parameters, with their shapes, and round-trips: a renamed attribute fails here, not when a
user loads a file.
"""
import numpy
import pytest
import torch

from elmo_plugin import ElmoBiLm
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.word_encoder import ElmoWordEncoder
from elmo_plugin.weights import layout
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.parameter_mapping import copy_into_parameters
from tests.random_weights import random_weight_arrays
from tests.helpers import ORACLE_ARCHITECTURES

WORD_OPTIONS = {
    "lstm": {"dim": 12, "projection_dim": 5, "n_layers": 3, "cell_clip": 3, "proj_clip": 3,
             "use_skip_connections": True},
    "n_tokens_vocab": 6,
}
WORDS = ["<S>", "</S>", "<UNK>", "the", "cat", "sat"]


def blocks_of(options: ElmoOptions, bias_as_in_file: bool):
    """Every block that holds biLM weights, built for `options`."""
    lstm = ElmoLstm(options.projection_dim, options.projection_dim, options.cell_dim, options.n_layers)
    if bias_as_in_file:
        lstm.store_biases_as_in_file()
    if options.word_inputs:
        token_layer = ElmoWordEncoder(WORDS, options.projection_dim)
    else:
        token_layer = ElmoCharacterEncoder(options)
    return {"token layer": token_layer, "lstm": lstm}


ARCHITECTURES = {**ORACLE_ARCHITECTURES, "word_inputs": lambda: WORD_OPTIONS}


@pytest.mark.parametrize("bias_as_in_file", [False, True])
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_each_block_maps_exactly_its_parameters_and_round_trips(architecture, bias_as_in_file):
    options = ElmoOptions.from_dict(ARCHITECTURES[architecture]())
    arrays = random_weight_arrays(options, seed=5)
    if options.word_inputs:
        arrays[layout.VOCABULARY] = numpy.array(WORDS, dtype=object)
    blocks = blocks_of(options, bias_as_in_file)
    written = {}
    for name, block in blocks.items():
        values = block.parameters_from_arrays(arrays)
        parameters = dict(block.named_parameters())
        assert set(values) == set(parameters), name
        for parameter_name, value in values.items():
            assert tuple(value.shape) == tuple(parameters[parameter_name].shape), parameter_name
        copy_into_parameters(block, values)
        written.update(block.arrays_from_parameters())
    # Together the blocks write back every dataset of the layout, unchanged.
    assert set(written) == set(layout.dataset_shapes(options))
    for dataset, array in arrays.items():
        if dataset == layout.VOCABULARY:
            assert list(written[dataset]) == list(array)
        else:
            # The folded LSTM bias goes through +1 and -1 in float32: exact to rounding.
            numpy.testing.assert_allclose(written[dataset], array, rtol=0, atol=1e-6, err_msg=dataset)


def test_the_bilm_mapping_is_its_blocks_mappings_under_their_attribute_names():
    options = ElmoOptions.from_dict(ORACLE_ARCHITECTURES["fixture"]())
    bilm = ElmoBiLm(options, None, random_weights=True)
    values = bilm.parameters_from_arrays(random_weight_arrays(options))
    assert set(values) == set(dict(bilm.named_parameters()))


def test_a_renamed_attribute_fails_the_mapping_by_name():
    encoder = ElmoCharacterEncoder(ElmoOptions.from_dict(ORACLE_ARCHITECTURES["fixture"]()))
    values = encoder.parameters_from_arrays(random_weight_arrays(encoder.options))
    encoder._output_projection = encoder._projection  # as a refactoring would rename it
    del encoder._projection
    with pytest.raises(ValueError, match=r"missing \['_output_projection.bias', "
                                         r"'_output_projection.weight'\], unknown \['_projection.bias'"):
        copy_into_parameters(encoder, values)


def test_a_wrong_shape_in_a_mapping_is_named():
    encoder = ElmoCharacterEncoder(ElmoOptions.from_dict(ORACLE_ARCHITECTURES["fixture"]()))
    values = encoder.parameters_from_arrays(random_weight_arrays(encoder.options))
    values["_projection.bias"] = numpy.zeros(3, dtype=numpy.float32)
    with pytest.raises(ValueError, match=r"gives _projection.bias the shape \(3,\)"):
        copy_into_parameters(encoder, values)


def test_copying_follows_the_parameters_dtype():
    encoder = ElmoCharacterEncoder(ElmoOptions.from_dict(ORACLE_ARCHITECTURES["fixture"]())).double()
    arrays = random_weight_arrays(encoder.options, seed=2)
    copy_into_parameters(encoder, encoder.parameters_from_arrays(arrays))
    assert encoder._projection.weight.dtype == torch.float64
    assert torch.equal(encoder._projection.bias, torch.from_numpy(arrays[layout.PROJECTION_BIAS]).double())
