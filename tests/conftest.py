import pytest
from allennlp.commands.train import train_model_from_file

from tests.helpers import BILM_CONFIGS, bilm_data_overrides


@pytest.fixture(scope="session")
def trained_tiny_bilm(tmp_path_factory):
    """training_config/bilm/tiny.jsonnet without dropout, trained once (~5 s) for all tests."""
    serialization_dir = tmp_path_factory.mktemp("tiny_bilm")
    train_model_from_file(
        str(BILM_CONFIGS / "tiny.jsonnet"),
        str(serialization_dir),
        overrides=bilm_data_overrides(**{"model.dropout": 0.0}),
    )
    return serialization_dir
