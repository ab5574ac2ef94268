"""Pools with their own servers: bad start-ups, two servers, a server killed mid-batch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engines.inference import client
from engines.inference.client import ServerUnavailable
from engines.inference.server_pool import ServerPool
from engines.inference.server_process import ServerStartError
from engines.inference.types import SamplingParams
from tests.engines.inference.conftest import small_config

pytestmark = pytest.mark.vllm

PROMPT = [1, 40, 41, 42, 43, 4, 2]


def test_an_unanswering_url_is_named(run: Any, tiny_model_dir: Path) -> None:
    pool = ServerPool(small_config(tiny_model_dir, server_urls=["http://127.0.0.1:9"]))
    with pytest.raises(ServerUnavailable, match=r"server http://127.0.0.1:9 \(server_urls\[0\]\) does not answer"):
        run(pool.start())


@pytest.mark.slow
def test_a_server_exiting_during_start_up_is_reported_with_its_log(
    vllm_available: str, run: Any, tiny_model_dir: Path
) -> None:
    # The tiny model has 1024 positions: vLLM refuses a longer context and exits.
    pool = ServerPool(small_config(tiny_model_dir, max_model_len=4096))
    with pytest.raises(ServerStartError, match="exited with code") as err:
        run(pool.start())
    assert "max_model_len" in str(err.value) or "max_position_embeddings" in str(err.value)
    assert all(not s.process.alive() for s in pool.slots)


@pytest.mark.slow
def test_two_servers_share_sessions_and_pause_reload_resume(
    vllm_available: str, run: Any, tiny_model_dir: Path, second_checkpoint: Path
) -> None:
    # weight_update="reload" exercises the in-place path (pause, reload, verify, resume)
    # that GPU builds use; on the CPU build its expert weights are not exact
    # (weight_files.py), so only the mechanics are checked here.
    async def scenario() -> ServerPool:
        async with ServerPool(small_config(tiny_model_dir, num_servers=2, weight_update="reload")) as pool:
            assert len(set(pool.urls)) == 2
            await check_session_affinity(pool)
            await check_reload_keeps_in_flight_requests(pool, second_checkpoint)
        return pool

    pool = run(scenario())
    assert all(not s.process.alive() for s in pool.slots)  # close() stopped everything


async def check_session_affinity(pool: ServerPool) -> None:
    sessions = [f"episode-{i}" for i in range(6)]
    for turn in range(3):
        outs = await asyncio.gather(
            *(pool.generate(PROMPT, SamplingParams(max_tokens=8, seed=turn), s) for s in sessions)
        )
        for s, out in zip(sessions, outs):
            assert out.server_url == pool.server_of(s)  # every turn of a session on its server
    assert {pool.server_of(s) for s in sessions} == set(pool.urls)  # new sessions spread over both


async def check_reload_keeps_in_flight_requests(pool: ServerPool, weights: Path) -> None:
    probe = SamplingParams(max_tokens=12, seed=5)
    before = await pool.generate(PROMPT, probe)
    batch = [
        asyncio.create_task(pool.generate(PROMPT, SamplingParams(max_tokens=150, seed=s), f"b{s}")) for s in range(8)
    ]
    await asyncio.sleep(0.5)
    await pool.update_weights(str(weights), 1)  # verify_checksums: both servers report identical weights
    done = await asyncio.gather(*batch)
    assert all(c.token_ids and c.weight_version == 0 for c in done)  # paused with mode=keep: none aborted
    assert {c.server_url for c in done} == set(pool.urls)
    a, b = [await pool.client.complete(url, PROMPT, probe, retries=0) for url in pool.urls]
    assert a.token_ids == b.token_ids and a.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    assert [s.version for s in pool.slots] == [1, 1]
    assert [await client.weight_version(pool._http, url) for url in pool.urls] == ["1", "1"]
    assert [await client.is_paused(pool._http, url) for url in pool.urls] == [False, False]
