"""A local server that loses its port: between `free_port` and the server's bind another
process may take the port; the server is started again on a new one, and reached there.
The server here is a real process (a small HTTP server with vLLM's `--port` argument)."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from engines.inference.server_process import LocalServer, ServerStartError, free_port

HEALTH_SERVER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _server(tmp_path: Path, port: int) -> LocalServer:
    script = tmp_path / "health.py"
    script.write_text(HEALTH_SERVER)
    argv = [sys.executable, str(script), "--port", str(port)]
    return LocalServer(argv, {}, f"http://127.0.0.1:{port}", tmp_path / "server.log")


@pytest.fixture
def taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_server_whose_port_was_taken_starts_again_on_a_new_one(tmp_path: Path, taken_port: int) -> None:
    server = _server(tmp_path, taken_port)
    server.start()
    try:
        asyncio.run(server.wait_started(30, new_port=free_port))
        assert server.url != f"http://127.0.0.1:{taken_port}" and server.alive()
        assert server.argv[-1] == server.url.rsplit(":", 1)[1]
        assert "Address already in use" in (tmp_path / "server.log").read_text()  # the first start's
    finally:
        server.stop()


def test_a_fixed_port_is_not_moved(tmp_path: Path, taken_port: int) -> None:
    server = _server(tmp_path, taken_port)
    server.start()
    try:
        with pytest.raises(ServerStartError, match="exited with code 1 while starting"):
            asyncio.run(server.wait_started(30, new_port=None))
        assert server.lost_its_port() and server.url.endswith(f":{taken_port}")
    finally:
        server.stop()
