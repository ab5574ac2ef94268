"""The S3 server (moto's, as its own process) killed with SIGKILL while a shard's
PUT is in flight (held at a proxy so the kill lands there every time), then
started again: the write is retried until it lands, whole and
once. moto keeps its objects in memory, so the restarted server is empty and the
bucket is made again; a proxy answers `503 SlowDown` (which S3 clients retry)
until it is, as S3 itself does while a bucket is unavailable."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from storage import shards
from storage.config import StorageConfig
from storage.fs import open_store
from tests.storage.conftest import make_episodes
from tests.storage.throttling_proxy import ThrottlingProxy

pytestmark = [pytest.mark.s3, pytest.mark.faults]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return proc
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.1)


def _create_bucket(port: int, name: str) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=name)


@pytest.mark.slow
def test_a_shard_write_survives_the_s3_server_killed_mid_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    port = _free_port()
    moto = _start_moto(port)
    _create_bucket(port, "lake")
    table = make_episodes("r", 0, 6000, seed=3)  # a shard of several MB: its upload takes a while
    try:
        with ThrottlingProxy(f"http://127.0.0.1:{port}", throttle_first=0) as proxy:
            store = open_store(StorageConfig(root="s3://lake/runs", s3_endpoint_url=proxy.url, retries=8))
            result: dict = {}
            proxy.release.clear()  # the shard's PUT is held in flight at the proxy
            writer = threading.Thread(
                target=lambda: result.update(uri=shards.write_shard(store, "r", 0, "final", table))
            )
            writer.start()
            assert proxy.put_arrived.wait(60), "the shard's PUT never came"
            proxy.throttle_first = 10**9  # SlowDown until the bucket exists again
            os.killpg(moto.pid, signal.SIGKILL)  # the write is in flight: its PUT goes to a dead server
            moto.wait(10)
            proxy.release.set()
            time.sleep(1.0)  # let the forwarded PUT fail against the dead server
            killed_at = proxy.requests
            moto = _start_moto(port)
            _create_bucket(port, "lake")
            with proxy._lock:
                proxy.throttle_first = 0  # from here on every request is forwarded
            writer.join(120)
            assert not writer.is_alive(), "the write did not finish after the server came back"
            assert "uri" in result and killed_at >= 1
        after = open_store(StorageConfig(root="s3://lake/runs", s3_endpoint_url=f"http://127.0.0.1:{port}"))
        assert shards.read_step(after, "r", 0).num_rows == 6000  # whole
        assert after.fs.ls("lake/runs/r/rollouts/step=0", detail=False) == ["lake/runs/r/rollouts/step=0/final.parquet"]
    finally:
        os.killpg(moto.pid, signal.SIGKILL)
        moto.wait(10)
