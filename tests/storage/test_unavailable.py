"""An unreachable or throttling S3 store: bounded retries, an outage waited out for
up to `storage.outage_limit_s` (said once on the terminal), then a clear
StorageUnavailableError naming the limit, and never a half-written or doubled shard."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from storage import query, shards
from storage.config import StorageConfig
from storage.errors import StorageUnavailableError
from storage.fs import open_store
from tests.storage.conftest import make_episodes
from tests.storage.outage_proxy import OutageProxy
from tests.storage.throttling_proxy import ThrottlingProxy

pytestmark = pytest.mark.s3


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_store_fails_after_bounded_retries(s3_bucket: str) -> None:
    root = f"s3://{s3_bucket}/lake"
    down = open_store(
        StorageConfig(root=root, s3_endpoint_url=f"http://127.0.0.1:{closed_port()}", retries=1, outage_limit_s=0)
    )
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
        store = open_store(StorageConfig(root=root, s3_endpoint_url=proxy.url, retries=2, outage_limit_s=0))
        with pytest.raises(
            StorageUnavailableError, match="after 3 attempts.*SlowDown|after 3 attempts.*reduce your request rate"
        ):
            shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 5))
        assert proxy.requests == 3
    assert not shards.shard_exists(open_store(root), "r", 0, "w0")


def test_an_outage_is_waited_out_said_once_and_every_shard_written_once(
    s3_server: dict[str, str], s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    root = f"s3://{s3_bucket}/lake"
    with OutageProxy(s3_server["AWS_ENDPOINT_URL"]) as proxy:
        store = open_store(StorageConfig(root=root, s3_endpoint_url=proxy.url, retries=0, outage_limit_s=60))
        shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 5))
        proxy.down()
        back = threading.Timer(4.0, proxy.up)
        back.start()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="storage.fs"):
            shards.write_shard(store, "r", 1, "w0", make_episodes("r", 1, 5))
        back.join()
    assert time.monotonic() - started >= 4.0  # it waited for the endpoint, then wrote
    said = [r.getMessage() for r in caplog.records if r.name == "storage.fs"]
    assert len(said) == 2, said
    assert said[0].startswith(f"the lake at {root} is unreachable (write {root}/r/rollouts/step=1/w0.parquet")
    assert "trying again for up to 60 s (storage.outage_limit_s)" in said[0]
    assert said[1].startswith(f"the lake at {root} is reachable again"), said[1]
    direct = open_store(root)
    assert [shards.read_step(direct, "r", s).num_rows for s in (0, 1)] == [5, 5]
    assert len(direct.fs.glob(f"{s3_bucket}/lake/r/rollouts/*/*.parquet")) == 2


def test_an_outage_longer_than_the_limit_fails_naming_the_limit_and_how_to_resume(
    s3_server: dict[str, str], s3_bucket: str
) -> None:
    root = f"s3://{s3_bucket}/lake"
    with OutageProxy(s3_server["AWS_ENDPOINT_URL"]) as proxy:
        store = open_store(StorageConfig(root=root, s3_endpoint_url=proxy.url, retries=0, outage_limit_s=3))
        proxy.down()
        started = time.monotonic()
        with pytest.raises(
            StorageUnavailableError,
            match=r"write .* failed on .* after 1 attempts, then tried again for \d+ s \(storage.outage_limit_s = 3\)"
            r".*run the same command again to resume",
        ):
            shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 5))
        waited = time.monotonic() - started
        proxy.up()
        assert not shards.shard_exists(store, "r", 0, "w0")  # back: nothing half-written
    # tries at 0, 1 and 3 s; the next (7 s) would pass the limit, so it gives up without that wait
    # (the bound leaves room for a slow connection refusal on a busy machine)
    assert 1.0 <= waited < 6.0
