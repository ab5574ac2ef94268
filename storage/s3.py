"""The s3fs filesystem behind `s3://` roots: endpoint, region, timeouts, retries.

botocore's "standard" retry mode (exponential backoff with jitter, capped at 20 s
per wait) retries connection errors, timeouts, 5xx and throttling codes (SlowDown,
Throttling) on every request, including the reads DuckDB makes through the
registered filesystem. s3fs's own retry loop is reduced to one attempt so the two
never multiply into an unbounded wait.
"""

from __future__ import annotations

import os

import s3fs

from storage.config import StorageConfig


class SingleAttemptS3FileSystem(s3fs.S3FileSystem):
    """s3fs whose own retry loop makes one attempt; botocore does the retrying."""

    retries = 1


def s3_filesystem(cfg: StorageConfig) -> s3fs.S3FileSystem:
    """An s3fs filesystem with listing caches off, so other writers' shards are seen at once."""
    client_kwargs = {}
    endpoint = cfg.s3_endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint
    region = cfg.s3_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        client_kwargs["region_name"] = region
    return SingleAttemptS3FileSystem(
        client_kwargs=client_kwargs,
        use_listings_cache=False,
        skip_instance_cache=True,
        config_kwargs={
            "retries": {"total_max_attempts": cfg.retries + 1, "mode": "standard"},
            "connect_timeout": cfg.connect_timeout_s,
            "read_timeout": cfg.read_timeout_s,
        },
    )
