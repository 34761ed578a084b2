"""
What a biLM training run can know is wrong is refused before the first training step (the
model's forward is never called), with the configuration keys named: mismatched readers and
loaders, a missing or unreadable validation file.
"""
import pytest
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError

from elmo_plugin.models.bilm import ElmoBiLmModel
from tests.helpers import BILM_CONFIGS, bilm_data_overrides

CONFIG = str(BILM_CONFIGS / "tiny.jsonnet")


@pytest.fixture(autouse=True)
def no_training_step(monkeypatch):
    def forward(*args, **kwargs):
        raise AssertionError("a training step ran before the configuration was refused")

    monkeypatch.setattr(ElmoBiLmModel, "forward", forward)


def train(tmp_path, **overrides):
    train_model_from_file(CONFIG, str(tmp_path / "run"), overrides=bilm_data_overrides(**overrides))


def test_training_streams_and_batch_size_against_the_validation_readers_streams(tmp_path):
    # The case: num_streams and batch_size changed for training only.
    with pytest.raises(ConfigurationError) as error:
        train(tmp_path, **{"dataset_reader.num_streams": 2, "data_loader.batch_size": 2})
    message = str(error.value)
    assert "batch_size is 2, but its reader has num_streams 4" in message, message
    assert "validation_dataset_reader" in message and "validation_data_loader" in message, message


def test_the_stream_count_alone_is_one_setting(tmp_path, monkeypatch):
    # Without batch_size, the loaders follow each reader: training 2 streams, validation 4.
    monkeypatch.undo()
    train(tmp_path, **{"dataset_reader.num_streams": 2, "trainer.num_epochs": 1})


def test_allennlps_own_loader_with_a_batch_size_that_fits_only_the_training_reader(tmp_path):
    with pytest.raises(ConfigurationError) as error:
        train(tmp_path, **{
            "dataset_reader.num_streams": 2,
            "data_loader": {"type": "multiprocess", "batch_size": 2, "shuffle": False},
        })
    message = str(error.value)
    assert message.startswith("The validation data loader's batch_size is 2, but its reader has num_streams 4")
    assert "validation_data_loader (or data_loader).batch_size" in message, message


@pytest.mark.parametrize(
    "loader, expected",
    [
        ({"data_loader.shuffle": True}, "shuffle is true"),
        ({"data_loader.num_workers": 2}, "num_workers is 2"),
    ],
)
def test_window_loader_settings_that_break_stream_order(tmp_path, loader, expected):
    with pytest.raises(ConfigurationError, match=expected):
        train(tmp_path, **loader)


def test_window_loader_with_a_sentence_reader(tmp_path):
    with pytest.raises(ConfigurationError, match="its reader is BiLmCorpusReader without them.*'multiprocess'"):
        train(tmp_path, dataset_reader={"type": "elmo_bilm_corpus"})


@pytest.mark.parametrize("lazy", [False, True])
def test_a_missing_validation_file(tmp_path, lazy):
    # Read lazily (max_instances_in_memory), AllenNLP would first open it after an epoch.
    loader = {"data_loader.max_instances_in_memory": 8} if lazy else {}
    missing = str(tmp_path / "heldout.txt")
    with pytest.raises(ConfigurationError, match=f"{missing} not found"):
        train(tmp_path, validation_data_path=missing, **loader)


def test_a_validation_file_with_a_bad_line(tmp_path):
    heldout = tmp_path / "heldout.txt"
    heldout.write_bytes(b"a good line\nthen \xff a bad one\n")
    with pytest.raises(ConfigurationError, match=f"{heldout}, line 2 is not valid UTF-8"):
        train(tmp_path, validation_data_path=str(heldout), **{"data_loader.max_instances_in_memory": 8})
