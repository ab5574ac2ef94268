"""A TCP proxy in front of the S3 server that a test can take down (connections
refused, open ones cut: the endpoint gone, as in an outage) and bring back on the same
port. Used by the tests of the lake's outage handling. Not a test module."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit


class OutageProxy:
    """`with OutageProxy(upstream) as proxy:` then `proxy.url`; `down()` and `up()`."""

    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OutageProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Listen again, on the same port as before."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)  # shutdown wakes the thread blocked in accept()
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            _close(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for conn in (src, dst):
                _close(conn)
                with self._lock:
                    self._open.discard(conn)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
