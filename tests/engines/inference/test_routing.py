"""Routing over slots (no server needed): affinity, least load, servers out of routing."""

from __future__ import annotations

import asyncio

from engines.inference.server_pool import Router
from engines.inference.server_process import ServerSlot


def slots(n: int) -> list[ServerSlot]:
    return [ServerSlot(i, f"http://s{i}", asyncio.Semaphore(1)) for i in range(n)]


def test_a_session_stays_on_its_server_and_new_ones_go_to_the_least_loaded() -> None:
    pool = slots(2)
    router = Router(pool)
    pool[0].load = 3
    assert router.pick("a") is pool[1]
    pool[1].load = 5
    assert router.pick("a") is pool[1]  # affinity beats load
    assert router.pick("b") is pool[0] and router.server_of("b") == "http://s0"
    router.release("b")
    assert router.server_of("b") is None


def test_unhealthy_or_unverified_servers_are_left_out() -> None:
    pool = slots(2)
    router = Router(pool)
    assert router.pick("a") is pool[0]
    pool[0].verified = False  # its loaded weights failed the check
    assert router.pick("a") is pool[1]
    pool[1].healthy = False
    assert router.pick("a") is None and router.pick(None) is None
