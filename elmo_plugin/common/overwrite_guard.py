"""
No command writes over its own inputs, `--overwrite` or not: an output file may not be an
input file, nor be written into an input directory (a model directory that gains a file can
stop being one model). Paths are compared as real paths, so links and relative spellings do
not hide it.
"""
import os
from typing import Iterable, Optional
from urllib.parse import urlparse

from allennlp.common.checks import ConfigurationError


def _local_path(given: str) -> Optional[str]:
    scheme = urlparse(given).scheme
    if scheme == "file":
        return given[len("file://"):]
    return given if scheme == "" else None


def refuse_writing_over_inputs(command: str, outputs: Iterable[str], inputs: Iterable[Optional[str]]) -> None:
    """
    Raises a `ConfigurationError` naming the output and the input when any of `outputs` (the
    files to be written) is one of `inputs` (paths or URLs; `None` and URLs ignored) or would
    be written into an input directory.
    """
    local_inputs = [(given, _local_path(os.fspath(given))) for given in inputs if given is not None]
    for output in outputs:
        real_output = os.path.realpath(output)
        for given, path in local_inputs:
            if path is None or not os.path.exists(path):
                continue
            real_input = os.path.realpath(path)
            if real_output == real_input:
                where = "is"
            elif os.path.isdir(real_input) and os.path.dirname(real_output) == real_input:
                where = "would be written into"
            else:
                continue
            raise ConfigurationError(
                f"{command}: the output {output} {where} the input {given}; writing it would "
                "destroy or change that input (--overwrite or not). Write to another path."
            )
