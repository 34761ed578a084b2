import os

import pytest
from allennlp.commands.train import train_model_from_file
from hypothesis import settings

from tests.helpers import BILM_CONFIGS, bilm_data_overrides

# Property tests: the same examples on every run and no example database written into the
# clone ("repeatable", the default); HYPOTHESIS_PROFILE=explore searches afresh and longer.
settings.register_profile("repeatable", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", max_examples=2000, database=None, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


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
