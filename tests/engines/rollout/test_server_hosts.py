"""The other hosts' reports in the lake (inference.hosts > 1), as the rollout lane's pool
waits for them; the hosts themselves run in tests/flows/test_lanes_apart.py."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from engines.inference.server_process import free_port
from engines.rollout.server_hosts import HostRecord, LakeHosts, read_record, record_path
from storage.atomic import write_bytes_atomic
from storage.fs import open_store


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_record_round_trips_and_is_absent_until_written(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    assert read_record(store, "r", 1) is None
    record = HostRecord(["http://h1:8000"], 3, {3: "/c/v3", 4: "/c/.v4.vllm-reload"})
    write_bytes_atomic(store, record_path("r", 1), record.to_json())
    assert read_record(store, "r", 1) == record


def test_the_pool_waits_for_a_checked_copy_and_for_servers_that_answer(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    server = HTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    live, dead = f"http://127.0.0.1:{server.server_port}", f"http://127.0.0.1:{free_port()}"
    hosts = LakeHosts(store, "r", timeout_s=20, poll_s=0.05)

    async def host_reports() -> None:
        # A record left by a host lane that died, then its next run's, then a new version.
        write_bytes_atomic(store, record_path("r", 1), HostRecord([dead], 0, {0: "/old/v0"}).to_json())
        await asyncio.sleep(0.3)
        write_bytes_atomic(store, record_path("r", 1), HostRecord([live], 0, {0: "/new/v0"}).to_json())
        await asyncio.sleep(0.3)
        write_bytes_atomic(store, record_path("r", 1), HostRecord([live], 0, {0: "/new/v0", 1: "/new/v1"}).to_json())

    async def pool() -> tuple[list[str], str]:
        reporting = asyncio.create_task(host_reports())
        urls = await hosts.server_urls(1)
        folder = await hosts.reload_from(1, 1)
        await reporting
        return urls, folder

    try:
        assert asyncio.run(pool()) == ([live], "/new/v1")
    finally:
        server.shutdown()


def test_a_host_that_never_reports_names_its_record_and_pool(tmp_path: Path) -> None:
    hosts = LakeHosts(open_store(str(tmp_path)), "r", timeout_s=0.2, poll_s=0.05)
    with pytest.raises(TimeoutError, match=r"host 2 reported no checked copy of version 5 in r/servers/host-2\.json"):
        asyncio.run(hosts.reload_from(2, 5))
    with pytest.raises(TimeoutError, match="tandem-servers"):
        asyncio.run(hosts.server_urls(2))
