"""
What the installed environment must hold, and the one-line answers when it does not.

`elmo_plugin` cannot declare AllenNLP as a pip dependency (allennlp 2.10.1 declares torch<1.13,
which has no build for Python 3.11), so a user who installs the package alone gets an
environment without AllenNLP. Instead of Python's bare `No module named 'allennlp'`, importing
the package then says what is missing and the command that installs the tested set, which the
package carries (`elmo_plugin/requirements.txt`). Standard library only: this runs before any
third-party import.

The set is installed with `--no-deps`, so pip replaces, without asking, any version that a
user's project already holds. Run as a script, before installing (from a clone or the unpacked
source: `python elmo_plugin/common/installation.py`), this module lists what the set would
replace in the running environment (`replaced_versions`). On Python 3.12 and newer the set has
no torchvision (its pinned build exists for 3.11 at most), so the user installs the one built
for their torch beside it; `--torchvision` names it (`torchvision_requirement`).
"""
import importlib.metadata
import importlib.util
import logging
import operator
import os
import re
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple

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
    if top_level == "torchvision" and "torchvision" not in pinned_versions():
        requirement = torchvision_requirement() or "torchvision (the build made for your torch)"
        return MissingDependencyError(
            f"elmo_plugin needs torchvision (AllenNLP imports it), which this environment lacks; on Python "
            f"{'.'.join(map(str, _running_python()))} the pinned set has none: install the one built for "
            f"your torch, from the index your torch came from: pip install {requirement}",
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


# `name==version`, optionally with a `python_version` marker: the only lines the set has besides
# comments.
_PINNED_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*(?:;\s*([^#]*?))?\s*(?:#.*)?$")
_PYTHON_VERSION_MARKER = re.compile(r"^python_version\s*(<=|>=|==|!=|<|>)\s*[\"']([\d.]+)[\"']$")
_COMPARISONS = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne
}


def _marker_holds(marker: str, python: Tuple[int, int]) -> bool:
    """Whether a `python_version OP "X.Y"` marker holds for `python`; a `ValueError` for any other
    marker (the set has no other kind, and this module reads it without `packaging`)."""
    match = _PYTHON_VERSION_MARKER.match(marker)
    if match is None:
        raise ValueError(f"unsupported environment marker in the pinned set: {marker!r}")
    return _COMPARISONS[match.group(1)](python, _release_numbers(match.group(2)))


def _running_python() -> Tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def pinned_versions(
    requirements_file: str = REQUIREMENTS_FILE, python: Optional[Tuple[int, int]] = None
) -> Dict[str, str]:
    """The version of each package that a requirements file of `name==version` lines pins for
    `python` (by default the running one; a line whose `python_version` marker does not hold is
    not installed there)."""
    python = python or _running_python()
    with open(requirements_file, encoding="utf-8") as lines:
        matches = [match for match in map(_PINNED_LINE.match, lines) if match]
    return {
        match.group(1): match.group(2)
        for match in matches
        if not match.group(3) or _marker_holds(match.group(3), python)
    }


def matching_torchvision(torch_version: str) -> Optional[str]:
    """The torchvision release built for a torch 2 release (torch 2.N.P goes with torchvision
    0.(N+15).P, `None` for other torch versions): on Python 3.12 and newer, where the set has no
    torchvision, the one to install with torch, from the same package index."""
    match = re.match(r"2\.(\d+)\.(\d+)", torch_version)
    return f"0.{int(match.group(1)) + 15}.{match.group(2)}" if match else None


def torchvision_requirement() -> Optional[str]:
    """`torchvision==VERSION` for the installed torch where the pinned set leaves torchvision to
    the user (Python 3.12 and newer), else `None`."""
    torch_version = _installed_version("torch")
    if "torchvision" in pinned_versions() or torch_version is None:
        return None
    version = matching_torchvision(torch_version)
    return f"torchvision=={version}" if version else None


class ReplacedVersion(NamedTuple):
    package: str
    installed: str  # the version this environment holds
    pinned: str  # the version the set would put in its place

    def is_older(self) -> bool:
        """Whether the pinned version is the older one (by its leading numbers)."""
        return _release_numbers(self.pinned) < _release_numbers(self.installed)


def _release_numbers(version: str) -> Tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", version.partition("+")[0]))


def _installed_version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def replaced_versions(requirements_file: str = REQUIREMENTS_FILE) -> List[ReplacedVersion]:
    """The packages of the pinned set that this environment holds at another version: what
    installing the set (`install_command`) would replace."""
    replaced = []
    for package, pinned in pinned_versions(requirements_file).items():
        installed = _installed_version(package)
        if installed is not None and installed != pinned:
            replaced.append(ReplacedVersion(package, installed, pinned))
    return replaced


def main(arguments: List[str]) -> int:
    """
    Prints what installing the pinned set into this environment would replace and add; with
    `--torchvision`, only the torchvision requirement to install with torch (empty where the
    set has one), for scripts: `... --torchvision | xargs -r pip install`.
    """
    if arguments == ["--torchvision"]:
        print(torchvision_requirement() or "")
        return 0
    if arguments:
        print(f"usage: python {__file__} [--torchvision]", file=sys.stderr)
        return 2
    pinned = pinned_versions()
    replaced = replaced_versions()
    absent = [package for package in pinned if _installed_version(package) is None]
    print(f"Installing elmo_plugin's pinned set ({REQUIREMENTS_FILE}, {len(pinned)} packages) into {sys.prefix}")
    if replaced:
        width = max(len(entry.package) for entry in replaced)
        print(f"would replace {len(replaced)} version(s) this environment holds:")
        for entry in replaced:
            older = "  (older)" if entry.is_older() else ""
            print(f"  {entry.package:<{width}}  {entry.installed} -> {entry.pinned}{older}")
    else:
        print("would replace none of the versions this environment holds.")
    unchanged = len(pinned) - len(replaced) - len(absent)
    print(f"It would add {len(absent)} package(s); {unchanged} are already at their pinned version.")
    if "torchvision" not in pinned:
        requirement = torchvision_requirement() or "the torchvision built for your torch"
        print(f"On Python {'.'.join(map(str, _running_python()))} it needs {requirement} beside it, "
              f"from the index your torch came from (the set's torchvision has no build for it).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
