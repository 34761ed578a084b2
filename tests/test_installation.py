"""
The package as an installed user meets it: `allennlp` finds the plugin in any directory (the
start-up hook), one-line answers for a missing AllenNLP and an untested torch, the demo's
output directory. The whole install into a fresh environment is `tests/test_wheel_install.py`.
"""
import configparser
import importlib.metadata
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import elmo_plugin_import_hook
from elmo_plugin.common import installation
from elmo_plugin.demo.run import DEMO_MARKER, prepare_output_directory
from tests.helpers import REPO_ROOT

ALLENNLP = str(Path(sys.executable).parent / "allennlp")
SUBCOMMANDS = ("elmo", "elmo-export", "elmo-import", "elmo-token-vectors")


def run_allennlp(arguments, cwd: Path, home: Path, **environment):
    """`allennlp ARGUMENTS` in `cwd` with HOME=`home` (so no ~/.allennlp/plugins)."""
    env = {key: value for key, value in os.environ.items() if key != "ELMO_PLUGIN_AUTOLOAD"}
    env.update(HOME=str(home), **environment)
    return subprocess.run([ALLENNLP, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def bare_directory(tmp_path):
    """A working directory without a plugins file and a HOME without ~/.allennlp/plugins."""
    (tmp_path / "work").mkdir()
    (tmp_path / "home").mkdir()
    assert not (tmp_path / "work" / ".allennlp_plugins").exists()
    return tmp_path / "work", tmp_path / "home"


def test_allennlp_has_every_subcommand_in_any_directory(bare_directory):
    work, home = bare_directory
    completed = run_allennlp(["--help"], work, home)
    assert completed.returncode == 0, completed.stderr[-3000:]
    listed = completed.stdout.split()
    assert all(name in listed for name in SUBCOMMANDS), completed.stdout


def test_a_plugins_file_naming_the_plugin_twice_is_harmless(bare_directory):
    work, home = bare_directory
    (work / ".allennlp_plugins").write_text("elmo_plugin\nelmo_plugin\n")
    completed = run_allennlp(["elmo", "--help"], work, home)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "could not be loaded" not in completed.stderr and "Traceback" not in completed.stderr
    assert "--weight-file" in completed.stdout


def test_the_automatic_registration_can_be_turned_off(bare_directory):
    work, home = bare_directory
    completed = run_allennlp(["--help"], work, home, ELMO_PLUGIN_AUTOLOAD="0")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "elmo-export" not in completed.stdout.split()


def test_processes_that_do_not_start_allennlp_do_not_import_the_plugin(bare_directory):
    work, home = bare_directory
    code = (
        "import sys, allennlp.common.plugins as plugins, allennlp.models; "
        "assert 'elmo_plugin' not in sys.modules, 'imported'; "
        "print(list(plugins.discover_plugins()))"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=work, env=dict(os.environ, HOME=str(home)),
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip() == "['elmo_plugin']"


def test_the_wrapped_discovery_yields_the_plugin_first_and_once():
    module = types.SimpleNamespace(discover_plugins=lambda: iter(["my_plugin", "elmo_plugin", "other"]))
    elmo_plugin_import_hook.register_with(module)
    elmo_plugin_import_hook.register_with(module)  # idempotent
    assert list(module.discover_plugins()) == ["elmo_plugin", "my_plugin", "other"]


def test_the_finder_answers_only_for_allennlps_plugins_module(monkeypatch):
    finder = elmo_plugin_import_hook.AllenNlpPluginFinder
    assert finder in sys.meta_path
    assert finder.find_spec("allennlp.common.util") is None
    import allennlp.common

    spec = finder.find_spec("allennlp.common.plugins", allennlp.common.__path__)
    assert isinstance(spec.loader, elmo_plugin_import_hook._RegisteringLoader)
    assert spec.loader.get_filename("allennlp.common.plugins").endswith("plugins.py")
    monkeypatch.setenv("ELMO_PLUGIN_AUTOLOAD", "0")
    assert finder.find_spec("allennlp.common.plugins", allennlp.common.__path__) is None


@pytest.mark.parametrize("missing", ["allennlp", "allennlp_models.tagging", "h5py"])
def test_a_missing_package_is_named_with_the_command_that_installs_it(missing, monkeypatch):
    monkeypatch.setattr(installation, "_installed", lambda package: False)  # as where it is missing
    error = installation.missing_dependency(ModuleNotFoundError(f"No module named {missing!r}", name=missing))
    message = str(error)
    assert "\n" not in message
    assert repr(missing.partition(".")[0]) in message
    assert f"pip install --no-deps --no-build-isolation -r {installation.REQUIREMENTS_FILE}" in message
    assert os.path.isfile(installation.REQUIREMENTS_FILE)


def test_a_missing_torch_says_to_install_a_build_first(monkeypatch):
    monkeypatch.setattr(installation, "_installed", lambda package: False)
    message = str(installation.missing_dependency(ModuleNotFoundError("x", name="torch")))
    assert "pip install torch==2.15.0" in message and "2.13 to 2.15" in message


@pytest.mark.parametrize("python, in_the_set", [((3, 11), True), ((3, 12), False), ((3, 13), False)])
def test_torchvision_is_in_the_set_only_where_its_pinned_build_exists(python, in_the_set):
    assert ("torchvision" in installation.pinned_versions(python=python)) is in_the_set
    # The rest of the set is the same for every Python.
    assert set(installation.pinned_versions(python=python)) - {"torchvision"} == set(
        installation.pinned_versions(python=(3, 11))
    ) - {"torchvision"}


def test_the_torchvision_built_for_a_torch():
    assert installation.matching_torchvision("2.13.0") == "0.28.0"
    assert installation.matching_torchvision("2.14.1+cu128") == "0.29.1"
    assert installation.matching_torchvision("2.15.0") == "0.30.0"
    assert installation.matching_torchvision("3.0.0") is None


def test_a_missing_torchvision_names_the_one_for_the_torch_where_the_set_has_none(monkeypatch):
    monkeypatch.setattr(installation, "_installed", lambda package: False)
    monkeypatch.setattr(installation, "_running_python", lambda: (3, 12))
    monkeypatch.setattr(installation, "_installed_version", {"torch": "2.14.1"}.get)
    message = str(installation.missing_dependency(ModuleNotFoundError("x", name="torchvision")))
    assert "\n" not in message
    assert "on Python 3.12 the pinned set has none" in message and message.endswith("pip install torchvision==0.29.1")


def test_a_marker_the_check_cannot_read_is_refused(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text('numpy==2.4.6; sys_platform == "linux"\n')
    with pytest.raises(ValueError, match="sys_platform"):
        installation.pinned_versions(str(requirements))


def test_our_own_missing_modules_are_not_disguised():
    assert installation.missing_dependency(ModuleNotFoundError("x", name="elmo_plugin.nothing")) is None
    # A module missing inside an installed package is not a missing install.
    assert installation.missing_dependency(ModuleNotFoundError("x", name="allennlp.modules.nothing")) is None
    assert installation.missing_dependency(ModuleNotFoundError("x")) is None


@pytest.mark.parametrize("version", ["2.12.1", "2.16.0", "3.0.0+cu128", "nightly"])
def test_an_untested_torch_is_warned_about_once(version, monkeypatch, caplog):
    monkeypatch.setattr(installation, "_warned_about_torch", False)
    with caplog.at_level(logging.WARNING, logger=installation.__name__):
        installation.warn_if_torch_untested(version)
        installation.warn_if_torch_untested(version)
    (record,) = caplog.records
    assert "tested with torch 2.13 to 2.15" in record.getMessage() and version in record.getMessage()


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0+cu126"])
def test_a_tested_torch_is_not_warned_about(version):
    assert installation.untested_torch_message(version) is None


def test_setup_cfg_states_the_tested_torch_range():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    (low, high) = installation.TESTED_TORCH
    requirement = f"torch>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"
    assert requirement in config["options"]["install_requires"].split()


def test_every_pinned_run_time_package_is_in_the_test_environment():
    """The run-time set is part of what `make test` installs (requirements.txt includes it)."""
    assert "-r elmo_plugin/requirements.txt" in (REPO_ROOT / "requirements.txt").read_text().splitlines()


def test_the_versions_the_pinned_set_would_replace_are_listed(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# a comment\n"
        "-r other.txt\n"
        "pytest==0.0.1  # installed here at another version\n"
        f"h5py=={importlib.metadata.version('h5py')}\n"
        "no-such-package-anywhere==1.0\n"
    )
    assert installation.pinned_versions(str(requirements)) == {
        "pytest": "0.0.1",
        "h5py": importlib.metadata.version("h5py"),
        "no-such-package-anywhere": "1.0",
    }
    replaced = installation.replaced_versions(str(requirements))
    assert replaced == [installation.ReplacedVersion("pytest", importlib.metadata.version("pytest"), "0.0.1")]
    assert replaced[0].is_older()
    assert not installation.ReplacedVersion("numpy", "1.26.4", "2.4.6").is_older()
    assert installation.ReplacedVersion("torch", "2.15.0+cu126", "2.13.0").is_older()


def test_the_check_before_installing_runs_as_a_script_from_the_source():
    """`python elmo_plugin/common/installation.py`, as the README says, before anything is installed:
    standard library only (a bare interpreter), and it reads the set beside it."""
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(REPO_ROOT / "elmo_plugin" / "common" / "installation.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    pinned = len(installation.pinned_versions())
    assert f"requirements.txt, {pinned} packages) into " in result.stdout
    # -S: without site-packages, every package of the set is one to add
    assert f"It would add {pinned} package(s); 0 are already at their pinned version." in result.stdout


def test_the_demo_never_deletes_a_directory_it_did_not_make(tmp_path):
    users = tmp_path / "my_data"
    users.mkdir()
    (users / "corpus.txt").write_text("precious\n")
    with pytest.raises(SystemExit, match="not a previous demo's output"):
        prepare_output_directory(str(users))
    assert (users / "corpus.txt").read_text() == "precious\n"
    demo = tmp_path / "demo_output"
    prepare_output_directory(str(demo))
    (demo / "old_result.txt").write_text("x")
    prepare_output_directory(str(demo))  # a previous demo's: replaced
    assert sorted(os.listdir(demo)) == [DEMO_MARKER]
