"""
The install a user makes in their own project (README, "Use it in your own project"): the
wheel built from this checkout, installed by the README's own commands into a fresh virtual
environment outside the repository, then used from another directory as they would use it.

About three minutes: pip takes the packages from its local cache and torch from the build this
environment runs (the same `torch==VERSION` line pip already resolved once for `make install`).
"""
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Dict, List

import h5py
import numpy
import pytest

from elmo_plugin import ElmoEmbedder
from elmo_plugin.common import installation
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT, TEST_FIXTURES

README_SECTION = "## Use it in your own project"


def readme_section() -> str:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split(README_SECTION, 1)[1].split("\n## ", 1)[0]


def readme_commands() -> Dict[str, List[str]]:
    """The shell lines of the section's first two code blocks: building the wheel, installing."""
    blocks = re.findall(r"```bash\n(.*?)```", readme_section(), re.S)
    lines = [[line.split("#")[0].strip() for line in block.splitlines() if line.strip()] for block in blocks]
    return {"build": lines[0], "install": lines[1]}


def run(command: List[str], cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, f"{command}:\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}"
    return completed


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built by the README's command from a copy of the checkout (a build writes
    into the source tree), in a fresh environment: one without the `wheel` package, as
    Python 3.11's `venv` makes them."""
    directory = tmp_path_factory.mktemp("wheel")
    builder = directory / "builder_venv"
    venv.create(builder, with_pip=True)
    source = directory / "source"
    shutil.copytree(REPO_ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "tests", "benchmarks", "build", "dist", "*.egg-info", "__pycache__", "demo_output"))
    (command,) = readme_commands()["build"]
    assert command.startswith("pip wheel ")
    run([str(builder / "bin" / "python"), "-m", *command.split()], cwd=source)
    (built,) = (source / "dist").glob("*.whl")
    return built


def test_the_wheel_installs_the_start_up_hook(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {"elmo_plugin.pth", "elmo_plugin_import_hook.py", "elmo_plugin_warnings.pth"} & set(names) == {
        "elmo_plugin.pth", "elmo_plugin_import_hook.py"
    }
    pth = zipfile.ZipFile(wheel).read("elmo_plugin.pth").decode().split("\n")
    assert "import elmo_plugin_import_hook" in pth and "import elmo_plugin_warnings" in pth
    # What the demo and users read from the installed package.
    assert {"elmo_plugin/requirements.txt", "elmo_plugin/training_config/bilm/demo.jsonnet",
            "elmo_plugin/training_config/elmo.libsonnet"} <= set(names)


def test_a_fresh_environment_outside_the_repository(wheel, tmp_path):
    environment = tmp_path / "users_venv"
    venv.create(environment, with_pip=True)
    python = str(environment / "bin" / "python")
    # The user's own directory: no plugins file, a HOME without ~/.allennlp/plugins.
    work, home = tmp_path / "my_project", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    user_env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    user_env.update(HOME=str(home), PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")))

    commands = readme_commands()["install"]
    assert [line.split()[:2] for line in commands] == [["pip", "install"]] * 4
    torch_line, tools_line, requirements_line, wheel_line = commands

    # The wheel alone: an error whose one line names what is missing and the command to run.
    run([python, "-m", *wheel_line.replace("dist/elmo_plugin-0.1.0-py3-none-any.whl", str(wheel)).split()],
        cwd=work, env=user_env)
    for command in ([python, "-c", "import elmo_plugin"], [python, "-m", "elmo_plugin", "elmo", "--help"]):
        completed = subprocess.run(command, cwd=work, env=user_env, capture_output=True, text=True, timeout=120)
        assert completed.returncode != 0
        last_line = completed.stderr.strip().splitlines()[-1]
        assert "elmo_plugin needs" in last_line and "pip install --no-deps --no-build-isolation -r " in last_line, (
            completed.stderr)

    # Then the README's lines as they are (torch: the build this environment runs; on Python 3.12+,
    # with the torchvision built for it, as the README says).
    torch_version = importlib.metadata.version("torch")
    torch_line = re.sub(r"torch==\S+", f"torch=={torch_version}", torch_line)
    if "torchvision" not in installation.pinned_versions():
        assert "`pip install torch==2.13.0 torchvision==0.28.0`" in " ".join(readme_section().split())
        torch_line += f" torchvision=={installation.matching_torchvision(torch_version)}"
    shipped = environment / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    requirements_line = requirements_line.replace("elmo_plugin/requirements.txt",
                                                  str(shipped / "elmo_plugin" / "requirements.txt"))
    for line in (torch_line, tools_line, requirements_line):
        run([python, "-m", *line.split()], cwd=work, env=user_env)

    # `allennlp elmo` on the shared fixture biLM, from the user's directory.
    allennlp = str(environment / "bin" / "allennlp")
    sentences = [["The", "bats", "hang", "upside", "down", "."], ["A", "short", "one"]]
    (work / "sentences.txt").write_text("".join(" ".join(s) + "\n" for s in sentences))
    run([allennlp, "elmo", "sentences.txt", "vectors.hdf5", "--all", "--deterministic",
         "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE], cwd=work, env=user_env)
    expected = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_sentences(sentences)
    with h5py.File(work / "vectors.hdf5", "r") as vectors:
        for index, embedding in enumerate(expected):
            numpy.testing.assert_allclose(vectors[str(index)][...], embedding, atol=1e-6)

    # `allennlp train` of a small task config with elmo_token_embedder.
    shutil.copy(TEST_FIXTURES / "tagger_elmo.jsonnet", work / "tagger.jsonnet")
    train_env = dict(user_env, ELMO_FIXTURE_DIR=str(Path(ELMO_WEIGHT_FILE).parent),
                     TAGGING_DATA=str(TEST_FIXTURES / "tagging" / "sentences.txt"))
    run([allennlp, "train", "tagger.jsonnet", "-s", "tagger", "-o", '{"trainer.num_epochs": 1}'],
        cwd=work, env=train_env)
    assert (work / "tagger" / "model.tar.gz").is_file()

    # The demo, with its configs from the installed package, in the user's directory (small).
    completed = run([python, "-c", "from elmo_plugin.demo.run import CONFIGS; print(CONFIGS)"], cwd=work, env=user_env)
    configs = Path(completed.stdout.strip().splitlines()[-1])
    assert configs.is_relative_to(environment) and (configs / "bilm" / "demo.jsonnet").is_file()
    run([python, "-m", "elmo_plugin.demo.run", "--train-sentences", "300", "--epochs", "1", "--tagger-epochs", "1"],
        cwd=work, env=user_env)
    assert (work / "demo_output" / "senses.png").is_file()
    assert (work / "demo_output" / "sense_tagger_elmo" / "model.tar.gz").is_file()
