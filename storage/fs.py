"""One `Store` value per lake root: the fsspec filesystem plus the root path.

Local paths use fsspec's local filesystem; `s3://` roots use s3fs (storage.s3),
whose requests botocore retries with bounded backoff. What is left after those
retries (refused connections, timeouts, throttling) is an outage to wait out:
`Store.call` tries the operation again with backoff, saying so once on the terminal,
for up to `storage.outage_limit_s` from its first failure, then raises a
`StorageUnavailableError` naming the operation, the root and the limit. Every write
is a whole object (a shard, a weight file, a marker), so an operation tried again
writes it once. Local disk errors are not transient and pass through unchanged.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import fsspec

from storage.config import StorageConfig
from storage.errors import StorageUnavailableError

T = TypeVar("T")
log = logging.getLogger(__name__)

OUTAGE_FIRST_WAIT_S, OUTAGE_MAX_WAIT_S = 1.0, 10.0  # backoff between tries of an operation during an outage

# errno values s3fs gives throttling and server-side failures (503 SlowDown -> EBUSY,
# 500 InternalError -> EREMOTEIO), plus the socket ones.
_TRANSIENT_ERRNOS = {errno.EBUSY, errno.EREMOTEIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED, errno.EAGAIN}


@dataclass(frozen=True)
class Store:
    """A lake root. `path()` gives filesystem paths, `url()` full URLs for DuckDB."""

    fs: fsspec.AbstractFileSystem
    root: str  # without protocol, no trailing slash
    protocol: str  # "file" or "s3"
    attempts: int = 1  # total attempts per S3 request (botocore's retry budget), for messages
    outage_limit_s: float = 0.0  # how long an operation is tried again while the store is unreachable

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def url(self, *parts: str) -> str:
        p = self.path(*parts)
        return p if self.protocol == "file" else f"{self.protocol}://{p}"

    def full_url(self, path: str) -> str:
        """URL of a path returned by `fs` (glob, ls), for messages and DuckDB."""
        return path if self.protocol == "file" else f"{self.protocol}://{path}"

    @property
    def display(self) -> str:
        return self.url()

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one store operation. A transient failure that outlived botocore's retries
        is waited out (tried again with backoff) for up to `outage_limit_s`, then becomes
        a StorageUnavailableError naming `what`, the root and the limit."""
        if self.protocol == "file":
            return fn()
        first_failure, wait = None, OUTAGE_FIRST_WAIT_S
        while True:
            try:
                result = fn()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    if self.outage_limit_s > 0:
                        log.warning(
                            "the lake at %s is unreachable (%s: %s); trying again for up to %.0f s "
                            "(storage.outage_limit_s)",
                            self.display,
                            what,
                            _short(exc),
                            self.outage_limit_s,
                        )
                if now - first_failure + wait > self.outage_limit_s:
                    raise self._unavailable(what, exc, now - first_failure) from exc
                time.sleep(wait)
                wait = min(2 * wait, OUTAGE_MAX_WAIT_S)
                continue
            if first_failure is not None:
                log.warning(
                    "the lake at %s is reachable again (%s) after %.0f s",
                    self.display,
                    what,
                    time.monotonic() - first_failure,
                )
            return result

    def _unavailable(self, what: str, exc: BaseException, waited_s: float) -> StorageUnavailableError:
        waited = f", then tried again for {waited_s:.0f} s (storage.outage_limit_s = {self.outage_limit_s:g})"
        return StorageUnavailableError(
            f"{what} failed on {self.display} after {self.attempts} attempts{waited if self.outage_limit_s else ''}: "
            f"{exc}. Check that the store is reachable (endpoint, credentials), then run the same command again "
            "to resume; raise storage.outage_limit_s to wait out longer outages, or storage.retries for a store "
            "that throttles."
        )


def _short(exc: BaseException) -> str:
    """The first line of an exception's message, for a one-line warning."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def is_transient(exc: BaseException) -> bool:
    """True for failures that may go away on retry: network, timeouts, throttling."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from s3fs.core import S3_RETRYABLE_ERRORS

    return isinstance(exc, (BotoConnectionError, *S3_RETRYABLE_ERRORS))


def open_store(config: StorageConfig | str) -> Store:
    """Resolve a lake root (local path or s3:// URL) to a `Store`."""
    cfg = StorageConfig(root=config) if isinstance(config, str) else config
    root = cfg.root
    if root.startswith("s3://"):
        bucket_and_prefix = root[len("s3://") :].rstrip("/")
        if not bucket_and_prefix:
            raise ValueError(f"storage.root {root!r} names no bucket: use s3://bucket or s3://bucket/prefix")
        from storage.s3 import s3_filesystem  # imported here so local-only use never pays for botocore

        return Store(
            fs=s3_filesystem(cfg),
            root=bucket_and_prefix,
            protocol="s3",
            attempts=cfg.retries + 1,
            outage_limit_s=cfg.outage_limit_s,
        )
    if "://" in root and not root.startswith("file://"):
        raise ValueError(f"storage.root {root!r}: use a local path or an s3://bucket/prefix URL")
    local = os.path.abspath(root.removeprefix("file://"))
    # auto_mkdir: a file put into a folder not made yet (a trainer state copied in from
    # outside the lake) gets its parents, as an S3 key needs none.
    return Store(fs=fsspec.filesystem("file", auto_mkdir=True), root=local.rstrip("/") or "/", protocol="file")
