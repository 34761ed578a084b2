import os
import shutil
import socket
import time

import h5py
import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.testing import AllenNlpTestCase

from elmo_plugin import ElmoBiLm
from elmo_plugin.weights import layout
from elmo_plugin.weights.formats.published import write_weight_file
from elmo_plugin.weights.options import ElmoOptions
from tests.random_weights import random_weight_arrays
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


class TestPublishedFormat(AllenNlpTestCase):
    def setup_method(self):
        super().setup_method()
        self.options = ElmoOptions.from_file(ELMO_OPTIONS_FILE)

    def copy_fixture_weights(self) -> str:
        path = str(self.TEST_DIR / "weights.hdf5")
        shutil.copy(ELMO_WEIGHT_FILE, path)
        os.chmod(path, 0o644)
        return path

    def test_shapes_describe_the_published_fixture(self):
        with h5py.File(ELMO_WEIGHT_FILE, "r") as handle:
            in_file = {}
            handle.visititems(
                lambda name, node: in_file.__setitem__(name, node.shape)
                if isinstance(node, h5py.Dataset)
                else None
            )
        assert in_file == layout.dataset_shapes(self.options)

    def test_state_dict_conversion_is_invertible(self):
        arrays = random_weight_arrays(self.options, seed=3)
        bilm = ElmoBiLm(self.options, None, random_weights=True)
        bilm.load_arrays(arrays)  # through every block's parameters_from_arrays
        round_trip = bilm.weight_arrays()
        assert set(round_trip) == set(arrays)
        for name in arrays:
            # The LSTM bias goes through +1 and -1 in float32, exact only to rounding.
            numpy.testing.assert_allclose(round_trip[name], arrays[name], rtol=0, atol=1e-7)

    def test_write_then_load_gives_the_same_parameters(self):
        arrays = random_weight_arrays(self.options, seed=4)
        path = str(self.TEST_DIR / "written.hdf5")
        write_weight_file(path, arrays, self.options)
        bilm = ElmoBiLm(self.options, path)
        expected = {name: torch.from_numpy(value) for name, value in bilm.parameters_from_arrays(arrays).items()}
        for name, parameter in bilm.named_parameters():
            assert torch.equal(parameter, expected[name]), name

    def test_failed_write_leaves_nothing(self):
        arrays = random_weight_arrays(self.options)
        arrays["CNN_proj/b_proj"] = numpy.zeros(3, dtype=numpy.float32)
        path = self.TEST_DIR / "broken.hdf5"
        with pytest.raises(ValueError, match="CNN_proj/b_proj"):
            write_weight_file(str(path), arrays, self.options)
        assert list(self.TEST_DIR.glob("broken*")) == [] and list(self.TEST_DIR.glob("*.partial")) == []

    def test_missing_weight_file(self):
        with pytest.raises(ConfigurationError, match="weight file .*absent.hdf5 does not exist"):
            ElmoBiLm(ELMO_OPTIONS_FILE, str(self.TEST_DIR / "absent.hdf5"))

    def test_not_an_hdf5_file(self):
        path = self.TEST_DIR / "weights.hdf5"
        path.write_text("this is not HDF5")
        with pytest.raises(ConfigurationError, match="weights.hdf5 is not a readable HDF5 file"):
            ElmoBiLm(ELMO_OPTIONS_FILE, str(path))

    def test_truncated_file(self):
        path = self.TEST_DIR / "truncated.hdf5"
        with open(ELMO_WEIGHT_FILE, "rb") as source:
            path.write_bytes(source.read()[: os.path.getsize(ELMO_WEIGHT_FILE) // 2])
        with pytest.raises(ConfigurationError, match="truncated"):
            ElmoBiLm(ELMO_OPTIONS_FILE, str(path))

    def test_missing_dataset_is_named(self):
        path = self.copy_fixture_weights()
        with h5py.File(path, "r+") as handle:
            del handle["CNN_high_1/W_carry"]
        with pytest.raises(ConfigurationError, match="has no dataset 'CNN_high_1/W_carry'"):
            ElmoBiLm(ELMO_OPTIONS_FILE, path)

    def test_wrong_shape_names_dataset_and_both_shapes(self):
        path = self.copy_fixture_weights()
        name = "RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"
        with h5py.File(path, "r+") as handle:
            del handle[name]
            handle.create_dataset(name, data=numpy.zeros((64, 8), dtype=numpy.float32))
        expected = rf"dataset '{name}' has shape \(64, 8\), but the options require \(64, 16\)"
        with pytest.raises(ConfigurationError, match=expected):
            ElmoBiLm(ELMO_OPTIONS_FILE, path)

    def test_options_disagreeing_with_weights(self):
        raw = ElmoOptions.from_file(ELMO_OPTIONS_FILE).to_dict()
        raw["lstm"]["dim"] = 32
        with pytest.raises(ConfigurationError, match=r"'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape \(32, 256\), but the options require \(32, 128\)"):
            ElmoBiLm(ElmoOptions.from_dict(raw), ELMO_WEIGHT_FILE)

    def test_unreachable_url_fails_fast(self):
        # A port on this machine that nothing listens on: connection refused at once.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(ConfigurationError, match="Cannot download the ELMo options file http://127.0.0.1"):
            ElmoBiLm(f"http://127.0.0.1:{port}/options.json", ELMO_WEIGHT_FILE)
        assert time.monotonic() - start < 10

    def test_options_that_describe_less_than_the_file_holds_are_refused(self):
        # n_highway 1 against a file with two highway layers; n_layers 1 against two LSTM layers.
        for key, value, dataset in (("char_cnn.n_highway", 1, "CNN_high_1/W_carry"),
                                    ("lstm.n_layers", 1, "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B")):
            raw = ElmoOptions.from_file(ELMO_OPTIONS_FILE).to_dict()
            section, name = key.split(".")
            raw[section][name] = value
            with pytest.raises(ConfigurationError, match=f"holds .* dataset\\(s\\) that the options do not describe "
                                                         f"\\(.*'{dataset}'"):
                ElmoBiLm(ElmoOptions.from_dict(raw), ELMO_WEIGHT_FILE)
