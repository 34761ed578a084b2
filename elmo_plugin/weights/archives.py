"""
Model archives (the NLPL repository's zips, tarballs): checked member by member, then
extracted once into AllenNLP's cache directory, under a digest of the archive's bytes (into a
temporary directory renamed into place, so a failed extraction leaves nothing that looks done).

Refused, with the archive and the member named: a member whose name would land outside the
extraction directory (absolute, `..`), links and device files, an archive that expands far
beyond its own size, and an archive that cannot be read (truncated, damaged).
"""
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from typing import Iterator, Tuple

from allennlp.common import file_utils
from allennlp.common.checks import ConfigurationError

# An archive may expand to this many times its size, or to this many bytes, whichever is more:
# ELMo weights hardly compress (HDF5 float32), so a higher ratio means something else.
MAX_EXPANSION_RATIO = 50
MAX_EXPANSION_FLOOR = 2**30


def is_archive(path: str) -> bool:
    """Whether the local file `path` is a zip or tar archive (by content, not by name)."""
    return os.path.isfile(path) and (zipfile.is_zipfile(path) or _is_tar(path))


def _is_tar(path: str) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (OSError, tarfile.TarError, EOFError):
        return False


def extracted_archive(path: str, source: str) -> str:
    """
    The directory the archive at the local `path` (given by the user as `source`) extracts to,
    in the cache directory; checked before anything is written. The directory is named by a
    digest of the archive's bytes, so an archive replaced under the same name (even with the
    same modification time, `cp -p`) is never read as the old one.
    """
    check_archive(path, source)
    target = os.path.join(file_utils.CACHE_DIRECTORY, f"{_sha256(path)}-extracted")
    if os.path.isdir(target):
        return target
    os.makedirs(file_utils.CACHE_DIRECTORY, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".extracting-", dir=file_utils.CACHE_DIRECTORY)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                archive.extractall(staging)
        else:
            with tarfile.open(path) as archive:
                archive.extractall(staging, filter="data")
        try:
            os.rename(staging, target)  # appears complete, or not at all
        except OSError:
            if not os.path.isdir(target):  # not another process's extraction, finished first
                raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
        raise ConfigurationError(
            f"The model archive {source} cannot be extracted (damaged or truncated?): {error}"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_archive(path: str, source: str) -> None:
    """Raises a `ConfigurationError` naming `source` and the member for anything unsafe."""
    total = 0
    for name, size, kind in _members(path, source):
        if kind not in ("file", "directory"):
            raise ConfigurationError(
                f"The model archive {source} holds {name!r}, a {kind}; a model archive holds "
                "files and directories only."
            )
        if _escapes(name):
            raise ConfigurationError(
                f"The model archive {source} holds {name!r}, whose path leads outside the "
                "directory it is extracted to; refusing to extract it."
            )
        total += size
    archive_size = max(os.path.getsize(path), 1)
    if total > max(MAX_EXPANSION_RATIO * archive_size, MAX_EXPANSION_FLOOR):
        raise ConfigurationError(
            f"The model archive {source} ({archive_size:,} bytes) would expand to {total:,} "
            f"bytes, more than {MAX_EXPANSION_RATIO} times its size; refusing to extract it."
        )


def _escapes(name: str) -> bool:
    parts = re.split(r"[\\/]", name)
    return name.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", name)) or ".." in parts


def _members(path: str, source: str) -> Iterator[Tuple[str, int, str]]:
    """(name, uncompressed size, kind) of every member."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    mode = info.external_attr >> 16
                    if (mode & 0o170000) == 0o120000:
                        kind = "symbolic link"
                    else:
                        kind = "directory" if info.is_dir() else "file"
                    yield info.filename, info.file_size, kind
        except zipfile.BadZipFile as error:
            raise ConfigurationError(f"The model archive {source} is not a readable zip file: {error}") from error
        return
    try:
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                if member.isfile():
                    kind = "file"
                elif member.isdir():
                    kind = "directory"
                elif member.issym() or member.islnk():
                    kind = "link"
                else:
                    kind = "special file"
                yield member.name, member.size, kind
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ConfigurationError(
            f"The model archive {source} is not a readable tar file (truncated?): {error}"
        ) from error
