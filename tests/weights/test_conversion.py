"""`allennlp elmo-import`: any format into the published layout, complete or not at all."""
import os
import shutil
import subprocess
import sys

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.weights.conversion import convert_bilm
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT


def test_a_model_directory_converts_and_computes_the_same(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    shutil.copy(ELMO_OPTIONS_FILE, directory / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, directory / "model.hdf5")
    paths = convert_bilm(str(directory), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path / "out")) == ["options.json", "weights.hdf5"]
    ids = batch_to_ids([["The", "cat"], ["x"]])
    with torch.no_grad():
        for ours, theirs in zip(ElmoBiLm(paths["options"], paths["weights"], stateful=False)(ids)["activations"],
                                ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)(ids)["activations"]):
            assert torch.equal(ours, theirs)
    with pytest.raises(ConfigurationError, match="already exist; pass --overwrite"):
        convert_bilm(ELMO_WEIGHT_FILE, str(tmp_path / "out"), options_file=ELMO_OPTIONS_FILE)
    convert_bilm(ELMO_WEIGHT_FILE, str(tmp_path / "out"), options_file=ELMO_OPTIONS_FILE, overwrite=True)


def test_nothing_is_written_when_the_source_is_bad(tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "notes.txt").write_text("no model here")
    with pytest.raises(ConfigurationError, match="is not a biLM in any known format"):
        convert_bilm(str(bad), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["model"]
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigurationError, match="a_file is a file; give a directory"):
        convert_bilm(ELMO_WEIGHT_FILE, str(tmp_path / "a_file"), options_file=ELMO_OPTIONS_FILE)


def test_the_command_line(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "elmo_plugin", "elmo-import", ELMO_WEIGHT_FILE, str(tmp_path / "out"),
         "--options-file", ELMO_OPTIONS_FILE],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"weights: {tmp_path / 'out' / 'weights.hdf5'}" in completed.stdout
