import os
import subprocess
import sys

import pytest

from elmo_plugin.kernels import allocation


# Allocates and frees a 256 MiB tensor ten times; prints the page faults of the last six (the
# heap settles in the first few).
FAULTS_OF_REPEATED_ALLOCATIONS = """
import resource, torch
from elmo_plugin.kernels import allocation
print(allocation.keep_freed_memory_for_reuse())
for _ in range(4):
    torch.ones(64 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(6):
    torch.ones(64 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str):
    result = subprocess.run(
        [sys.executable, "-c", FAULTS_OF_REPEATED_ALLOCATIONS],
        env={**os.environ, allocation.ENVIRONMENT_VARIABLE: mode},
        capture_output=True, text=True, check=True,
    )
    applied, faults = result.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not allocation.glibc_on_linux(), reason="the setting is glibc's")
def test_freed_memory_is_reused_without_faulting_pages_in_again():
    kept, faults_kept = _faults(allocation.KEEP)
    left, faults_system = _faults(allocation.SYSTEM)
    assert kept and not left
    pages = (256 << 20) // 4096
    assert faults_system > 5 * pages  # each allocation faulted in again, page by page
    assert faults_kept < pages // 10


def test_a_bad_switch_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(allocation.ENVIRONMENT_VARIABLE, "off")
    with pytest.raises(ValueError, match=r"ELMO_PLUGIN_MALLOC='off': expected one of \('keep', 'system'\)"):
        allocation.keep_freed_memory_for_reuse()


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(allocation, "_applied", False)
    monkeypatch.setattr(allocation, "glibc_on_linux", lambda: False)
    assert allocation.keep_freed_memory_for_reuse() is False
