"""Fixtures of the weight-file tests: a cache directory of their own, a local HTTP server."""
import http.server
import threading
from functools import partial

import pytest
from allennlp.common import file_utils


@pytest.fixture
def cache_directory(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    directory.mkdir()
    monkeypatch.setattr(file_utils, "CACHE_DIRECTORY", str(directory))
    return directory


@pytest.fixture
def server(tmp_path):
    """An HTTP server on this machine serving tmp_path/served; stopped by `server.stop()`."""
    served = tmp_path / "served"
    served.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    class Server:
        root = served
        url = f"http://127.0.0.1:{httpd.server_address[1]}"

        @staticmethod
        def stop():
            httpd.shutdown()
            httpd.server_close()

    yield Server
    if thread.is_alive():
        Server.stop()
