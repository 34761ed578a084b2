"""A command stopped by a bad input says what is wrong in one line; --verbose shows the traceback."""
import sys

import pytest
from allennlp.commands import main
from allennlp.common.checks import ConfigurationError

from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE


def run(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["allennlp", *argv])
    main(prog="allennlp")


@pytest.mark.parametrize("command", [
    lambda d: ["elmo", str(d / "missing.txt"), str(d / "out.hdf5"), "--all",
               "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE],
    lambda d: ["elmo-token-vectors", str(d / "missing.txt"), str(d / "vectors"),
               "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE],
    lambda d: ["elmo-import", str(d / "missing_model"), str(d / "out")],
    lambda d: ["elmo-export", str(d / "missing_archive"), str(d / "out")],
], ids=["elmo", "elmo-token-vectors", "elmo-import", "elmo-export"])
def test_a_bad_input_ends_with_its_message_alone(monkeypatch, tmp_path, capsys, command):
    with pytest.raises(SystemExit) as stopped:
        run(monkeypatch, *command(tmp_path))
    message = stopped.value.code
    assert isinstance(message, str) and message.startswith("ConfigurationError: ") and "\n" not in message
    assert "missing" in message
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(ConfigurationError):
        run(monkeypatch, *command(tmp_path), "--verbose")
