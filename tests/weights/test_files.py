"""Paths and URLs of ELMo files: local files, downloads into the cache, offline use of it."""
import logging

import pytest
from allennlp.common import file_utils
from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights.files import resolve_elmo_file


def test_a_local_file_is_its_own_path(tmp_path):
    path = tmp_path / "options.json"
    path.write_text("{}")
    assert resolve_elmo_file(str(path), "ELMo options file") == str(path)
    assert resolve_elmo_file(path, "ELMo options file") == str(path)  # a PathLike too


def test_a_missing_local_file_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match=r"The ELMo weight file .*absent.hdf5 does not exist"):
        resolve_elmo_file(str(tmp_path / "absent.hdf5"), "ELMo weight file")
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_elmo_file(f"file://{tmp_path}/absent.hdf5", "ELMo weight file")


def test_a_url_is_downloaded_once_and_its_cached_copy_serves_offline(cache_directory, server, caplog):
    (server.root / "options.json").write_text('{"lstm": {}}')
    url = f"{server.url}/options.json"
    downloaded = resolve_elmo_file(url, "ELMo options file")
    assert downloaded.startswith(str(cache_directory))
    assert open(downloaded).read() == '{"lstm": {}}'
    server.stop()
    with caplog.at_level(logging.WARNING):
        offline = resolve_elmo_file(url, "ELMo options file")
    assert offline == downloaded
    assert "Cannot reach" in caplog.text and "using the cached copy" in caplog.text


def test_an_unreachable_url_without_a_cached_copy_says_what_to_do(cache_directory, server):
    url = f"{server.url}/never-downloaded.hdf5"
    server.stop()
    with pytest.raises(ConfigurationError, match="Cannot download the ELMo weight file .*pass its local path"):
        resolve_elmo_file(url, "ELMo weight file")


def test_other_remote_stores_get_a_clear_error(cache_directory, monkeypatch):
    # What botocore raises without network or credentials, named with the URL and what to do.
    from botocore.exceptions import EndpointConnectionError

    def unreachable(*arguments, **keywords):
        raise EndpointConnectionError(endpoint_url="https://bucket.s3.amazonaws.com/elmo.hdf5")

    monkeypatch.setattr(file_utils, "cached_path", unreachable)
    with pytest.raises(ConfigurationError, match=r"Cannot download the ELMo weight file s3://bucket/elmo.hdf5: "
                                                 r"EndpointConnectionError: .*s3:// credentials and network"):
        resolve_elmo_file("s3://bucket/elmo.hdf5", "ELMo weight file")
