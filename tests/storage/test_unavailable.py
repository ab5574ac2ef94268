"""An unreachable or throttling S3 store: bounded retries, then a clear
StorageUnavailableError, and never a half-written shard."""

from __future__ import annotations

import socket
import time

import pytest

from storage import query, shards
from storage.config import StorageConfig
from storage.errors import StorageUnavailableError
from storage.fs import open_store
from tests.storage.conftest import make_episodes
from tests.storage.throttling_proxy import ThrottlingProxy

pytestmark = pytest.mark.s3


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_store_fails_after_bounded_retries(s3_bucket: str) -> None:
    root = f"s3://{s3_bucket}/lake"
    down = open_store(StorageConfig(root=root, s3_endpoint_url=f"http://127.0.0.1:{closed_port()}", retries=1))
    started = time.monotonic()
    with pytest.raises(
        StorageUnavailableError,
        match=rf"write s3://{s3_bucket}/lake/r/rollouts/step=0/w0.parquet failed .*after 2 attempts.*Check that the store is reachable",
    ):
        shards.write_shard(down, "r", 0, "w0", make_episodes("r", 0, 5))
    # botocore's standard backoff waits at most 1 s between the two attempts.
    assert time.monotonic() - started < 5
    with pytest.raises(StorageUnavailableError, match="find run r failed"):
        query.connect(down, "r")
    assert open_store(root).fs.glob(f"{s3_bucket}/lake/**") == []


def test_throttled_requests_are_retried_until_they_succeed(s3_server: dict[str, str], s3_bucket: str) -> None:
    root = f"s3://{s3_bucket}/lake"
    with ThrottlingProxy(s3_server["AWS_ENDPOINT_URL"], throttle_first=1) as proxy:
        store = open_store(StorageConfig(root=root, s3_endpoint_url=proxy.url, retries=2))
        shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 5))
        assert proxy.requests == 2  # one throttled, then the PUT that went through
    assert shards.read_step(open_store(root), "r", 0).num_rows == 5


def test_a_store_that_keeps_throttling_gets_exactly_the_configured_attempts(
    s3_server: dict[str, str], s3_bucket: str
) -> None:
    root = f"s3://{s3_bucket}/lake"
    with ThrottlingProxy(s3_server["AWS_ENDPOINT_URL"], throttle_first=10**6) as proxy:
        store = open_store(StorageConfig(root=root, s3_endpoint_url=proxy.url, retries=2))
        with pytest.raises(
            StorageUnavailableError, match="after 3 attempts.*SlowDown|after 3 attempts.*reduce your request rate"
        ):
            shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 5))
        assert proxy.requests == 3
    assert not shards.shard_exists(open_store(root), "r", 0, "w0")
