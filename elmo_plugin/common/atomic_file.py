"""Writing a file so that it only ever appears under its name complete."""
import contextlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_output_path(path: str, suffix: str = ".partial") -> Iterator[str]:
    """
    Yields a temporary path in `path`'s directory to write to; on success it is flushed to the
    disk (`fsync`), renamed to `path` (replacing any file there) and the rename itself flushed,
    on any error or interruption it is removed. Readers of `path` therefore see the old file or
    the complete new one, never a half-written one, also after a power loss.
    """
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary_path = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=suffix, dir=directory
    )
    os.close(descriptor)
    try:
        # mkstemp creates the file private (0600); the result gets the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary_path, 0o666 & ~umask)
        yield temporary_path
        _fsync(temporary_path)
        os.replace(temporary_path, path)
        _fsync(directory)
    except BaseException:
        if os.path.exists(temporary_path):
            os.remove(temporary_path)
        raise


def _fsync(path: str) -> None:
    """Flushes a file's (or a directory's entries') data to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_text_atomically(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` through `atomic_output_path`."""
    with atomic_output_path(path) as temporary_path:
        with open(temporary_path, "w", encoding="utf-8") as handle:
            handle.write(text)
