"""Wait for every awaitable to end, keeping their errors as results, but never a signal.

`asyncio.gather(..., return_exceptions=True)` returns each awaitable's exception as its
result, BaseExceptions included. Prefect's flow engine turns SIGTERM into
`TerminationSignal`, a BaseException raised wherever the flow's main thread is at that
moment: a gather that kept it as a result swallowed the signal, and a SIGTERMed
`tandem run` went on to its last step. `settle` re-raises such an interrupt once every
awaitable has ended (a child's own cancellation stays a result)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def settle(*awaitables: Awaitable[Any]) -> list[Any]:
    """Each awaitable's result or exception, in order; an interrupt (a BaseException that
    is neither an Exception nor a cancellation) is raised instead."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, (Exception, asyncio.CancelledError)):
            raise result
    return results
