"""Holding one slot of a run's limit (tasks/limits.py) through a Prefect server that is
restarting: the lanes take their slot once, when they start, and a server killed at
that moment (it is restarted within seconds, flows/prefect_api.py) answers nothing for
a while. Prefect's own acquisition does not retry a refused connection, so an
unanswered request is tried again with backoff, up to `patience_s`, saying so; a
refusal by the server, or a longer outage, raises as before."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import httpx
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
from prefect.concurrency.asyncio import concurrency as async_concurrency
from prefect.concurrency.sync import concurrency as sync_concurrency

from tasks.limits import SLOT_LEASE_S
from tasks.progress import say

PATIENCE_S = 180.0  # a restarted server answered within 12 s under the suite's load


@contextlib.asynccontextmanager
async def held_slot(limit: str, patience_s: float = PATIENCE_S) -> AsyncIterator[None]:
    """One slot of `limit` for the block, its lease renewed meanwhile."""
    async with contextlib.AsyncExitStack() as stack:
        for delay in _backoff(patience_s):
            try:
                await stack.enter_async_context(async_concurrency(limit, occupy=1, lease_duration=SLOT_LEASE_S))
                break
            except ConcurrencySlotAcquisitionError as exc:
                _give_up_unless_unanswered(exc, delay, limit)
            await asyncio.sleep(delay)  # type: ignore[arg-type]
        yield


@contextlib.contextmanager
def held_slot_sync(limit: str, patience_s: float = PATIENCE_S) -> Iterator[None]:
    """`held_slot` for synchronous code (the trainer lane's flow)."""
    with contextlib.ExitStack() as stack:
        for delay in _backoff(patience_s):
            try:
                stack.enter_context(sync_concurrency(limit, occupy=1, lease_duration=SLOT_LEASE_S))
                break
            except ConcurrencySlotAcquisitionError as exc:
                _give_up_unless_unanswered(exc, delay, limit)
            time.sleep(delay)  # type: ignore[arg-type]
        yield


def _backoff(patience_s: float) -> Iterator[float | None]:
    """Delays 1, 2, 4, 8, then 15 s until `patience_s` is spent; then None (the last try)."""
    spent, delay = 0.0, 1.0
    while spent < patience_s:
        yield delay
        spent, delay = spent + delay, min(delay * 2, 15.0)
    yield None


def _give_up_unless_unanswered(exc: Exception, delay: float | None, limit: str) -> None:
    """Re-raise `exc` unless the server did not answer and patience remains."""
    if delay is None or not _unanswered(exc):
        raise exc
    say(f"[tandem] the Prefect server did not answer while taking a slot of {limit}; trying again in {delay:.0f} s")


def _unanswered(exc: BaseException) -> bool:
    """Whether a connection error (no server listening, or one dropped) caused `exc`."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.TransportError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
