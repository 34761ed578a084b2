import os
import shutil
import sys

# The fixed kernel table in every test and the processes they start: outputs compared byte for
# byte (workers, resumed runs) and against AllenNLP must not depend on which kernel won a timing
# on the machine. tests/kernels/test_choice.py tests the measured choice itself.
os.environ["ELMO_PLUGIN_KERNEL_CHOICE"] = "fixed"

import pytest  # noqa: E402
from allennlp.commands.train import train_model_from_file  # noqa: E402
from hypothesis import settings  # noqa: E402

from elmo_plugin.kernels import choice  # noqa: E402
from tests.helpers import BILM_CONFIGS, bilm_data_overrides  # noqa: E402

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


@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """The measured kernel choice, with a cache file of its own (its path) and no decision
    from before."""
    monkeypatch.setattr(choice, "CACHE_PATH", tmp_path / "kernel_choice.json")
    choice.set_mode(choice.MEASURE)
    choice.forget_decisions()
    yield tmp_path / "kernel_choice.json"
    choice.set_mode(None)
    choice.forget_decisions()


def pytest_sessionfinish(session, exitstatus):
    # AllenNLP's testing module makes a temporary directory when it is imported, which only its
    # test cases' teardown removes: a run whose last test is not one of them would leave it.
    test_case = sys.modules.get("allennlp.common.testing.test_case")
    if test_case is not None:
        shutil.rmtree(test_case.TEST_DIR, ignore_errors=True)
