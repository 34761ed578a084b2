"""
`allennlp train --recover` after a kill -9 or a full disk, in the middle of an epoch or of a
checkpoint's writing, continues exactly where the biLM stopped: same weights and same metrics
as a run that was never interrupted. Faults come from `tests/training/faults.py`.
"""
import json
import os
import subprocess
import sys

import pytest
import torch
from allennlp.commands.train import train_model_from_file

from tests.helpers import BILM_CONFIGS, REPO_ROOT, bilm_data_overrides
from tests.training.faults import TRAINING_FAULT  # registers inject_fault

NUM_STREAMS = 2
CONFIG = str(BILM_CONFIGS / "tiny.jsonnet")
# About 30 batches an epoch.
OVERRIDES = bilm_data_overrides(
    **{
        "dataset_reader.window_size": 3,
        "dataset_reader.num_streams": NUM_STREAMS,
        "validation_dataset_reader.window_size": 3,
        "validation_dataset_reader.num_streams": NUM_STREAMS,
        # Read (and shuffle) the data again on every pass, as for a corpus too big to keep.
        "data_loader.max_instances_in_memory": 4 * NUM_STREAMS,
        "trainer.num_epochs": 2,
        "trainer.checkpointer": {
            "type": "atomic", "save_every_num_seconds": None, "save_every_num_batches": 4,
        },
        "trainer.callbacks": [{"type": "elmo_bilm"}, {"type": "inject_fault"}],
    }
)
PACKAGES = ["elmo_plugin", "tests.training.faults"]
# Figures of the run, not of its outcome.
RUN_DEPENDENT = ("duration", "memory_MB", "epoch_start", "training_start")


def train_in_subprocess(serialization_dir, fault: str, recover: bool = False):
    script = (
        "import sys, elmo_plugin, tests.training.faults; "
        "from allennlp.commands.train import train_model_from_file; "
        "train_model_from_file(sys.argv[1], sys.argv[2], overrides=sys.argv[3], "
        f"recover={recover}, include_package={PACKAGES!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", script, CONFIG, str(serialization_dir), OVERRIDES],
        cwd=REPO_ROOT, env=dict(os.environ, **{TRAINING_FAULT: fault}),
        capture_output=True, text=True, timeout=300,
    )


def recover(serialization_dir):
    train_model_from_file(
        CONFIG, str(serialization_dir), overrides=OVERRIDES, recover=True, include_package=PACKAGES
    )


def checkpoint_files(serialization_dir):
    return sorted(name for name in os.listdir(serialization_dir) if "state_e" in name)


def outcome(serialization_dir):
    metrics = {
        key: value
        for key, value in json.loads((serialization_dir / "metrics.json").read_text()).items()
        if not any(word in key for word in RUN_DEPENDENT)
    }
    weights = torch.load(serialization_dir / "best.th", weights_only=True)
    return metrics, weights


def assert_same_outcome(serialization_dir, expected):
    metrics, weights = outcome(serialization_dir)
    expected_metrics, expected_weights = expected
    assert metrics == expected_metrics
    assert weights.keys() == expected_weights.keys()
    for name, value in expected_weights.items():
        assert torch.equal(weights[name], value), name


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    serialization_dir = tmp_path_factory.mktemp("uninterrupted")
    train_model_from_file(CONFIG, str(serialization_dir), overrides=OVERRIDES, include_package=PACKAGES)
    return outcome(serialization_dir)


def test_kill_mid_epoch_then_recover_equals_an_uninterrupted_run(tmp_path, uninterrupted):
    serialization_dir = tmp_path / "killed"
    # In the last epoch, three batches after a checkpoint.
    killed = train_in_subprocess(serialization_dir, "kill:1:7")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (serialization_dir / "metrics.json").exists()
    assert "model_state_e1_b4.th" in checkpoint_files(serialization_dir)
    recover(serialization_dir)
    assert_same_outcome(serialization_dir, uninterrupted)


def test_full_disk_then_kill_while_writing_checkpoints_then_recover(tmp_path, uninterrupted):
    serialization_dir = tmp_path / "faults"
    full = train_in_subprocess(serialization_dir, "full_disk_in_checkpoint:1:8")
    assert full.returncode == 1, full.stderr[-3000:]
    message = full.stderr.strip().splitlines()[-1]
    assert "Cannot write the checkpoint" in message and "training_state_e1_b8.th" in message, message
    assert "latest complete checkpoint is kept" in message and "--recover" in message, message
    # Nothing of the failed checkpoint, not even a temporary file; the one before it complete.
    names = checkpoint_files(serialization_dir)
    assert not any("e1_b8" in name for name in names), names
    assert {"model_state_e1_b4.th", "training_state_e1_b4.th"} <= set(names), names

    # Killed while writing the first checkpoint after batch 12 of the last epoch. (AllenNLP's
    # checkpointer counts its batches again from the checkpoint it recovered from.)
    killed = train_in_subprocess(serialization_dir, "kill_in_checkpoint:1:12", recover=True)
    assert killed.returncode == -9, killed.stderr[-3000:]
    names = checkpoint_files(serialization_dir)
    half_written = [name for name in names if name.startswith(".")]
    assert len(half_written) == 1 and half_written[0].endswith(".tmp"), names
    checkpoints = [name for name in names if not name.startswith(".")]
    # Complete checkpoints only, each of both files, one of them written by this run.
    assert {name.split("_state_")[1] for name in checkpoints if name.startswith("model")} == {
        name.split("_state_")[1] for name in checkpoints if name.startswith("training")}, names
    assert set(checkpoints) - {"model_state_e1_b4.th", "training_state_e1_b4.th"}, names

    recover(serialization_dir)
    assert_same_outcome(serialization_dir, uninterrupted)


def test_a_second_trainer_on_a_directory_in_use_stops_before_its_first_step(tmp_path):
    # A run stopped midway; while another process holds the directory's trainer lock (as a
    # running trainer does), `--recover` into it is refused before it trains.
    serialization_dir = tmp_path / "in_use"
    assert train_in_subprocess(serialization_dir, "kill:1:7").returncode == -9
    before = checkpoint_files(serialization_dir)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, elmo_plugin; from elmo_plugin.training.checkpointer import AtomicCheckpointer; "
         "checkpointer = AtomicCheckpointer(sys.argv[1]); print('holding', flush=True); time.sleep(600)",
         str(serialization_dir)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        second = train_in_subprocess(serialization_dir, "", recover=True)
        assert second.returncode == 1
        message = second.stderr.strip().splitlines()[-1]
        assert f"Another process is training into {serialization_dir}" in message, second.stderr[-3000:]
        assert checkpoint_files(serialization_dir) == before and not (serialization_dir / "metrics.json").exists()
    finally:
        holder.kill()  # any exit releases the lock
        holder.wait()
    recover(serialization_dir)  # the directory is free again
    assert (serialization_dir / "metrics.json").exists()
