"""Pools with their own servers: bad start-ups, two servers, a server killed mid-batch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engines.inference import routes
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
def test_a_server_exiting_during_start_up_is_reported_with_its_log(vllm_available: str, run: Any, tiny_model_dir: Path) -> None:
    # The tiny model has 1024 positions: vLLM refuses a longer context and exits.
    pool = ServerPool(small_config(tiny_model_dir, max_model_len=4096))
    with pytest.raises(ServerStartError, match="exited with code") as err:
        run(pool.start())
    assert "max_model_len" in str(err.value) or "max_position_embeddings" in str(err.value)
    assert all(not s.process.alive() for s in pool.slots)


@pytest.mark.slow
def test_two_servers_affinity_updates_and_a_kill_mid_batch(vllm_available: str, run: Any, tiny_model_dir: Path, second_checkpoint: Path) -> None:
    async def scenario() -> None:
        async with ServerPool(small_config(tiny_model_dir, num_servers=2, max_restarts=1)) as pool:
            await check_session_affinity(pool)
            await check_update_reaches_both(pool, second_checkpoint)
            await check_kill_mid_batch(pool)
        assert all(not s.process.alive() for s in pool.slots)  # close() stopped everything

    run(scenario())


async def check_session_affinity(pool: ServerPool) -> None:
    sessions = [f"episode-{i}" for i in range(6)]
    for turn in range(3):
        outs = await asyncio.gather(*(pool.generate(PROMPT, SamplingParams(max_tokens=8, seed=turn), s) for s in sessions))
        for s, out in zip(sessions, outs):
            assert out.server_url == pool.server_of(s)  # every turn of a session on its server
    assert {pool.server_of(s) for s in sessions} == set(pool.urls)  # new sessions spread over both


async def check_update_reaches_both(pool: ServerPool, weights: Path) -> None:
    await pool.update_weights(str(weights), 1)  # verify_checksums: both report identical weights
    a, b = [await pool.client.complete(url, PROMPT, SamplingParams(max_tokens=12, seed=5), retries=0) for url in pool.urls]
    assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert [s.version for s in pool.slots] == [1, 1]


async def check_kill_mid_batch(pool: ServerPool) -> None:
    killed = pool.slots[0]
    batch = [asyncio.create_task(pool.generate(PROMPT, SamplingParams(max_tokens=120, seed=s), f"k{s}")) for s in range(12)]
    await asyncio.sleep(1.0)
    on_killed = [s for s in range(12) if pool.server_of(f"k{s}") == killed.url]
    assert on_killed
    await asyncio.to_thread(killed.process.kill)
    done = await asyncio.gather(*batch)  # none dropped: re-sent to the other server
    assert len(done) == 12 and all(c.token_ids for c in done)
    assert sum(c.server_url == pool.slots[1].url for c in done) > 12 - len(on_killed)  # some were re-sent
    await asyncio.wait_for(killed.recovering, timeout=240)  # restarted with the current weights
    assert killed.healthy and killed.restarts == 1 and killed.version == 1
    a, b = [await pool.client.complete(url, PROMPT, SamplingParams(max_tokens=12, seed=5), retries=0) for url in pool.urls]
    assert a.token_ids == b.token_ids  # the restarted server serves the updated weights
    assert [await routes.weight_version(pool._http, url) for url in pool.urls] == ["1", "1"]
