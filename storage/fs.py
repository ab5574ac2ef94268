"""One `Store` value per lake root: the fsspec filesystem plus the root path.

Local paths use fsspec's local filesystem; `s3://` roots use s3fs with listing
caches off (another process's new shards must be seen at once) and bounded retries.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import fsspec

from storage.config import StorageConfig
from storage.errors import NotFoundError, StorageUnavailableError

T = TypeVar("T")

# Errors worth retrying: network resets, timeouts, throttling surfaced as OSError.
_TRANSIENT = (OSError, TimeoutError, ConnectionError)


@dataclass(frozen=True)
class Store:
    """A lake root. `path()` gives filesystem paths, `url()` full URLs for DuckDB."""

    fs: fsspec.AbstractFileSystem
    root: str  # without protocol, no trailing slash
    protocol: str  # "file" or "s3"
    retries: int = 5
    retry_backoff_s: float = 0.2

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def url(self, *parts: str) -> str:
        p = self.path(*parts)
        return p if self.protocol == "file" else f"{self.protocol}://{p}"

    @property
    def display(self) -> str:
        return self.url()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run `fn` with bounded exponential backoff on transient errors."""
        delay = self.retry_backoff_s
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except (FileNotFoundError, NotFoundError):
                raise
            except _TRANSIENT as exc:
                if attempt == self.retries:
                    raise StorageUnavailableError(
                        f"{what} failed after {self.retries + 1} attempts on {self.display}: {exc}. "
                        "Check that the store is reachable (endpoint, credentials) and retry."
                    ) from exc
                time.sleep(delay * (1 + random.random() * 0.25))
                delay *= 2
        raise AssertionError("unreachable")


def open_store(config: StorageConfig | str) -> Store:
    """Resolve a lake root (local path or s3:// URL) to a `Store`."""
    cfg = StorageConfig(root=config) if isinstance(config, str) else config
    root = cfg.root
    if root.startswith("s3://"):
        return Store(
            fs=_s3_filesystem(cfg),
            root=root[len("s3://") :].rstrip("/"),
            protocol="s3",
            retries=cfg.retries,
            retry_backoff_s=cfg.retry_backoff_s,
        )
    if "://" in root and not root.startswith("file://"):
        raise ValueError(f"storage.root {root!r}: use a local path or an s3://bucket/prefix URL")
    local = os.path.abspath(root.removeprefix("file://"))
    return Store(
        fs=fsspec.filesystem("file"),
        root=local.rstrip("/") or "/",
        protocol="file",
        retries=cfg.retries,
        retry_backoff_s=cfg.retry_backoff_s,
    )


def _s3_filesystem(cfg: StorageConfig) -> fsspec.AbstractFileSystem:
    import s3fs  # imported here so local-only use never pays for botocore

    client_kwargs = {}
    endpoint = cfg.s3_endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint
    region = cfg.s3_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        client_kwargs["region_name"] = region
    return s3fs.S3FileSystem(
        client_kwargs=client_kwargs,
        use_listings_cache=False,
        skip_instance_cache=True,
        # botocore's own retries handle throttling (SlowDown, 503) with backoff.
        config_kwargs={
            "retries": {"max_attempts": cfg.retries + 1, "mode": "standard"},
            "connect_timeout": cfg.connect_timeout_s,
            "read_timeout": 60,
        },
        retries=cfg.retries + 1,
    )
