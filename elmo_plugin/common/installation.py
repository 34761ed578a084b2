"""
What the installed environment must hold, and the one-line answers when it does not.

`elmo_plugin` cannot declare AllenNLP as a pip dependency (allennlp 2.10.1 declares torch<1.13,
which has no build for Python 3.11), so a user who installs the package alone gets an
environment without AllenNLP. Instead of Python's bare `No module named 'allennlp'`, importing
the package then says what is missing and the command that installs the tested set, which the
package carries (`elmo_plugin/requirements.txt`). Standard library only: this runs before any
third-party import.
"""
import importlib.util
import logging
import os
import re
from typing import Optional, Tuple

logger = logging.getLogger(__name__)

# The torch releases (major, minor) the test suite passed on, oldest and newest; setup.cfg's
# install_requires states the same range (tests/test_installation.py keeps them equal).
TESTED_TORCH: Tuple[Tuple[int, int], Tuple[int, int]] = ((2, 13), (2, 15))

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Files the package carries (setup.cfg, package_data).
REQUIREMENTS_FILE = os.path.join(PACKAGE_DIR, "requirements.txt")
TRAINING_CONFIG_DIR = os.path.join(PACKAGE_DIR, "training_config")


def install_command() -> str:
    """The command that installs the pinned run-time set into the running environment."""
    return f"pip install --no-deps --no-build-isolation -r {REQUIREMENTS_FILE}"


class MissingDependencyError(ModuleNotFoundError):
    """A package elmo_plugin needs is not installed; the message says how to install it."""


def missing_dependency(error: ModuleNotFoundError) -> Optional[MissingDependencyError]:
    """
    The one-line error for `error` when it is a third-party package missing from the
    environment; `None` when it is not (a module of this package, or no name), so that the
    caller re-raises the original.
    """
    name = error.name or ""
    top_level = name.partition(".")[0]
    if not top_level or top_level == "elmo_plugin" or _installed(top_level):
        return None  # ours, or a module missing inside an installed package: not an install step
    if top_level == "torch":
        low, high = (".".join(map(str, version)) for version in TESTED_TORCH)
        return MissingDependencyError(
            f"elmo_plugin needs torch, which this environment lacks: install your build first "
            f"(pip install torch=={high}.0, or your CUDA build; {low} to {high} are tested), then "
            f"{install_command()}",
            name=name,
        )
    return MissingDependencyError(
        f"elmo_plugin needs the Python package {top_level!r}, which this environment lacks "
        f"(AllenNLP cannot be a pip dependency of elmo_plugin: it pins torch<1.13). Install the "
        f"tested set: {install_command()}",
        name=name,
    )


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def torch_release(version: str) -> Optional[Tuple[int, int]]:
    """(major, minor) of a torch version string such as '2.13.0+cpu'; `None` if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def untested_torch_message(version: str) -> Optional[str]:
    """The warning for a torch outside `TESTED_TORCH`, or `None` inside it."""
    release = torch_release(version)
    low, high = TESTED_TORCH
    if release is not None and low <= release <= high:
        return None
    tested = f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"
    return (
        f"elmo_plugin is tested with torch {tested}; this environment has torch {version}. "
        f"If something fails, install a tested torch (pip install torch=={high[0]}.{high[1]}.0)."
    )


_warned_about_torch = False


def warn_if_torch_untested(version: str) -> None:
    """Logs `untested_torch_message` once per process."""
    global _warned_about_torch
    message = untested_torch_message(version)
    if message is not None and not _warned_about_torch:
        _warned_about_torch = True
        logger.warning(message)
