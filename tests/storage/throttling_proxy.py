"""A real HTTP proxy in front of the S3 server that answers `503 SlowDown` (what S3
sends when throttling) to the first N requests, then forwards, counting requests.
Used by the tests to watch retries from the outside. Not a test module."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class ThrottlingProxy:
    """`with ThrottlingProxy(upstream, throttle_first=3) as proxy:` then use `proxy.url`."""

    def __init__(self, upstream: str, throttle_first: int) -> None:
        self.upstream = urlsplit(upstream)
        self.throttle_first = throttle_first
        self.requests = 0
        # A test that clears `release` holds every PUT here (after its body arrived, before
        # it is forwarded) and learns of it through `put_arrived`: a write caught in flight.
        self.put_arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ThrottlingProxy:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy.requests += 1
                    throttle = proxy.requests <= proxy.throttle_first
                if throttle:
                    self._reply(503, {"Content-Type": "application/xml"}, _SLOW_DOWN)
                    return
                if self.command == "PUT":
                    proxy.put_arrived.set()
                    proxy.release.wait(60)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                resp = conn.getresponse()
                data = resp.read()
                headers = {
                    k: v
                    for k, v in resp.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "content-length")
                }
                self._reply(resp.status, headers, data)
                conn.close()

            def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        return Handler
