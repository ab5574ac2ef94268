"""A lane's slot taken while the Prefect server does not answer (killed, and restarted
within seconds): Prefect's acquisition fails at once on a client that never connected,
so tasks/slots.py tries again until the server answers, saying so; past its patience it
raises. The server is reached through a proxy that a test takes down and brings back."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from prefect.client.orchestration import get_client
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
from prefect.settings import PREFECT_API_URL, temporary_settings

from tasks.slots import held_slot, held_slot_sync
from tests.storage.outage_proxy import OutageProxy


def _limit(name: str) -> None:
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, 1)


def _active(name: str) -> int:
    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(name).active_slots


def test_a_slot_is_taken_once_the_server_answers_again(prefect_server, capsys: pytest.CaptureFixture[str]) -> None:
    api = prefect_server["PREFECT_API_URL"]
    with OutageProxy(api.removesuffix("/api")) as proxy, temporary_settings({PREFECT_API_URL: f"{proxy.url}/api"}):
        for name, hold in (("t-slot-sync", held_slot_sync), ("t-slot-async", None)):
            _limit(name)
            proxy.down()
            threading.Timer(4.0, proxy.up).start()
            start = time.monotonic()
            if hold is not None:
                with hold(name):
                    waited, active = time.monotonic() - start, _active(name)
            else:

                async def take(limit: str = name) -> tuple[float, int]:
                    async with held_slot(limit):
                        return time.monotonic() - start, await asyncio.to_thread(_active, limit)

                waited, active = asyncio.run(take())
            assert waited >= 3.5 and active == 1, (name, waited, active)
            assert _active(name) == 0  # released after the block
        said = capsys.readouterr().out
        assert "the Prefect server did not answer while taking a slot of t-slot-sync; trying again" in said


def test_past_its_patience_the_slot_is_not_taken(prefect_server) -> None:
    api = prefect_server["PREFECT_API_URL"]
    with OutageProxy(api.removesuffix("/api")) as proxy, temporary_settings({PREFECT_API_URL: f"{proxy.url}/api"}):
        _limit("t-slot-gone")
        proxy.down()
        start = time.monotonic()
        with pytest.raises(ConcurrencySlotAcquisitionError), held_slot_sync("t-slot-gone", patience_s=3):
            pass
        assert time.monotonic() - start < 30
