"""
Turns the path or URL of an ELMo file (or of a model directory or archive) into a local path,
failing fast and clearly.

`cached_path` retries an unreachable host with back-off for about 35 seconds and then raises
a bare `ConnectionError`; a user who mistyped a URL or is offline deserves a one-line answer
in a few seconds, and an offline user with a cached copy should simply get that copy.
"""
import logging
import os
from urllib.parse import urlparse

import requests
from allennlp.common import file_utils
from allennlp.common.checks import ConfigurationError
from cached_path import find_latest_cached

from elmo_plugin.weights import archives

logger = logging.getLogger(__name__)

# (connect, read) seconds for the reachability probe of an http(s) URL.
_PROBE_TIMEOUT = (5.0, 30.0)


def resolve_elmo_file(path_or_url: str, description: str) -> str:
    """
    Returns a local path for `path_or_url` (downloading and caching URLs with `cached_path`).

    # Parameters

    path_or_url : `str`
        A local path, or any URL `cached_path` understands.
    description : `str`
        What the file is ("ELMo options file", "ELMo weight file"), used in error messages.
    """
    path_or_url = os.fspath(path_or_url)
    scheme = urlparse(path_or_url).scheme
    if scheme in ("http", "https"):
        try:
            requests.head(path_or_url, timeout=_PROBE_TIMEOUT, allow_redirects=True)
        except requests.RequestException as error:
            cached = find_latest_cached(path_or_url, file_utils.CACHE_DIRECTORY)
            if cached is not None:
                logger.warning(
                    "Cannot reach %s (%s); using the cached copy %s", path_or_url, error, cached
                )
                return str(cached)
            raise ConfigurationError(
                f"Cannot download the {description} {path_or_url}: {error}. Check the URL or "
                f"download the file yourself and pass its local path."
            ) from error
    elif scheme in ("", "file"):
        local_path = path_or_url.replace("file://", "", 1)
        if not os.path.exists(local_path):
            raise ConfigurationError(f"The {description} {path_or_url} does not exist.")
        # Not through cached_path: it reads '!' in a path as its archive-member separator.
        return local_path
    try:
        return str(file_utils.cached_path(path_or_url))
    except Exception as error:  # each remote store (s3, gs, hf) raises its client library's errors
        raise ConfigurationError(
            f"Cannot download the {description} {path_or_url}: {type(error).__name__}: {error}. "
            f"Check the URL and your {scheme}:// credentials and network, or download the file "
            "yourself and pass its local path."
        ) from error


_ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


def resolve_model_source(path_or_url: str, description: str) -> str:
    """
    `resolve_elmo_file`, and for an archive (a model zip or tarball) the directory it is
    extracted to in the cache (see `archives`); a TensorFlow checkpoint prefix as it is. A directory that holds nothing but one
    directory stands for that one (archives often wrap their files in a folder).
    """
    path_or_url = os.fspath(path_or_url)
    if not os.path.exists(path_or_url) and os.path.isfile(path_or_url + ".index"):
        return path_or_url  # a TensorFlow checkpoint prefix (`model.ckpt-N`): its files are beside
    local_path = resolve_elmo_file(path_or_url, description)
    if archives.is_archive(local_path):
        local_path = archives.extracted_archive(local_path, path_or_url)
    elif path_or_url.lower().endswith(_ARCHIVE_SUFFIXES) and os.path.isfile(local_path):
        raise ConfigurationError(
            f"The {description} {path_or_url} is not a readable archive (truncated or damaged?)."
        )
    while os.path.isdir(local_path):
        entries = [entry for entry in os.listdir(local_path) if not entry.startswith(".")]
        if len(entries) != 1 or not os.path.isdir(os.path.join(local_path, entries[0])):
            break
        local_path = os.path.join(local_path, entries[0])
    return local_path
