"""Live weight updates on a real vLLM CPU server.

The pool reloads in place through its worker extension, which re-packs the CPU
build's MoE experts (vLLM's own reload leaves them unpacked: logprobs off by up to
0.46 nats). These tests check the served logprobs against transformers on the new
checkpoint itself.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from engines.inference import client
from engines.inference.server_pool import ServerPool
from engines.inference.types import SamplingParams
from tests.engines.inference.conftest import small_config

pytestmark = pytest.mark.vllm

PROMPT = [1, 40, 41, 42, 43, 4, 2]  # <|user|> ... <|end|><|assistant|>


def other_checkpoint(pool: Any, first: Path, second: Path) -> Path:
    """Whichever of the two checkpoints the pool is not serving now."""
    return first if pool.weights_dir == str(second.resolve()) else second


def max_logprob_error(checkpoint: Path, prompt: list[int], completion: Any) -> float:
    """Largest gap between the served logprobs and transformers' on `checkpoint`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + completion.token_ids])).logits[0].float(), dim=-1)
    expected = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion.token_ids)]
    return max(abs(a - b) for a, b in zip(completion.logprobs, expected))


@pytest.mark.slow
def test_an_update_serves_the_new_checkpoint_and_keeps_in_flight_requests(
    pool: Any, run: Any, tiny_model_dir: Path, second_checkpoint: Path
) -> None:
    target = other_checkpoint(pool, tiny_model_dir, second_checkpoint)
    probe = SamplingParams(max_tokens=16, seed=3)

    async def scenario() -> tuple[Any, list[Any], float, Any]:
        before = await pool.generate(PROMPT, probe)
        batch = [asyncio.create_task(pool.generate(PROMPT, SamplingParams(max_tokens=150, seed=s))) for s in range(6)]
        await asyncio.sleep(0.3)  # the batch is decoding
        seconds = await pool.update_weights(str(target), pool.version + 1)
        return before, await asyncio.gather(*batch), seconds, await pool.generate(PROMPT, probe)

    old = pool.version
    before, in_flight, seconds, after = run(scenario())
    assert 0 < seconds < 300 and pool.version == old + 1
    assert all(c.token_ids and c.weight_version == old for c in in_flight)  # finished, none dropped
    assert before.weight_version == old and after.weight_version == old + 1
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    assert max_logprob_error(target, PROMPT, after) < 1e-3  # exactly the new checkpoint's policy
    assert run(client.weight_version(pool._http, pool.urls[0])) == str(old + 1)
    assert run(client.is_paused(pool._http, pool.urls[0])) is False


@pytest.mark.slow
@pytest.mark.faults
def test_a_server_killed_mid_batch_restarts_on_the_current_weights(pool: Any, run: Any, tiny_model_dir: Path) -> None:
    slot = pool.slots[0]
    current = Path(pool.weights_dir or tiny_model_dir)

    async def scenario() -> tuple[list[Any], Any]:
        # Four share a seed, so they go out as one coalesced request; four are sent alone.
        seeds = [0, 0, 0, 0, 1, 2, 3, 4]
        batches = pool.batcher.batches_sent
        batch = [
            asyncio.create_task(
                pool.generate(
                    PROMPT[:-2] + [40 + i] + PROMPT[-2:], SamplingParams(max_tokens=150, seed=s, ignore_eos=True)
                )
            )
            for i, s in enumerate(seeds)
        ]
        # Kill as soon as the batches are in flight (a fixed sleep let a quiet machine
        # finish all 150 tokens first); eos is ignored so none ends early.
        deadline = time.monotonic() + 10
        while not (slot.load > 0 and pool.batcher.batches_sent > batches) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert slot.load > 0 and pool.batcher.batches_sent > batches  # the batches are in flight
        await asyncio.to_thread(slot.process.kill)
        done = await asyncio.gather(*batch)  # held until the restart, then re-sent; none dropped
        return done, await pool.generate(PROMPT, SamplingParams(max_tokens=12, seed=5))

    restarts = slot.restarts
    done, after = run(scenario())
    assert len(done) == 8 and all(c.token_ids and c.weight_version == pool.version for c in done)
    assert slot.restarts == restarts + 1 and slot.healthy and slot.process.alive()
    assert max_logprob_error(current, PROMPT, after) < 1e-3  # restarted on the current version's weights
    assert run(client.weight_version(pool._http, slot.url)) == str(pool.version)


def test_bad_updates_are_refused_before_touching_a_server(
    pool: Any, run: Any, tmp_path: Path, second_checkpoint: Path
) -> None:
    version, restarts = pool.version, pool.slots[0].restarts
    with pytest.raises(FileNotFoundError, match=f"weights_dir {tmp_path}: no \\*.safetensors"):
        run(pool.update_weights(str(tmp_path), version + 1))
    with pytest.raises(ValueError, match="older than the served version"):
        run(pool.update_weights(str(second_checkpoint), version - 1))
    assert pool.version == version and pool.slots[0].restarts == restarts
    assert run(client.is_paused(pool._http, pool.urls[0])) is False


@pytest.mark.slow
def test_repeated_reloads_stay_exact(pool: Any, run: Any, tiny_model_dir: Path, second_checkpoint: Path) -> None:
    # Each reload re-packs the experts from the new checkpoint, never from a packed copy.
    for _ in range(3):
        target = other_checkpoint(pool, tiny_model_dir, second_checkpoint)
        seconds = run(pool.update_weights(str(target), pool.version + 1))
        completion = run(pool.generate(PROMPT, SamplingParams(max_tokens=16, seed=7)))
        assert seconds < 30 and completion.weight_version == pool.version
        assert max_logprob_error(target, PROMPT, completion) < 1e-3


@pytest.mark.slow
def test_restart_updates_serve_the_new_checkpoint(
    vllm_available: str, run: Any, tiny_model_dir: Path, second_checkpoint: Path
) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with ServerPool(
            small_config(tiny_model_dir, weight_update="restart", worker_extension=False)
        ) as restarting:
            await restarting.update_weights(str(second_checkpoint), 1)
            return restarting.slots[0], await restarting.generate(PROMPT, SamplingParams(max_tokens=16, seed=3))

    slot, completion = run(scenario())
    assert completion.weight_version == 1 and slot.version == 1
    assert max_logprob_error(second_checkpoint, PROMPT, completion) < 1e-3
