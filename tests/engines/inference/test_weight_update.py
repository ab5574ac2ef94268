"""Live weight updates on a real vLLM CPU server: pause, reload, verify, resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engines.inference import routes
from engines.inference.types import SamplingParams

pytestmark = pytest.mark.vllm

PROMPT = [1, 40, 41, 42, 43, 4, 2]  # <|user|> ... <|end|><|assistant|>


def test_a_new_checkpoint_changes_the_outputs_and_their_version(pool: Any, run: Any, second_checkpoint: Path) -> None:
    params = SamplingParams(max_tokens=16, seed=3)
    before = run(pool.generate(PROMPT, params))
    version = pool.version + 1
    seconds = run(pool.update_weights(str(second_checkpoint), version))
    after = run(pool.generate(PROMPT, params))
    assert 0 < seconds < 60
    assert after.weight_version == version and before.weight_version == version - 1
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    assert run(routes.weight_version(pool._http, pool.urls[0])) == str(version)
    assert run(routes.is_paused(pool._http, pool.urls[0])) is False


def test_in_flight_requests_survive_an_update(pool: Any, run: Any, second_checkpoint: Path) -> None:
    async def scenario() -> tuple[list[Any], float, int]:
        old = pool.version
        batch = [asyncio.create_task(pool.generate(PROMPT, SamplingParams(max_tokens=150, seed=s))) for s in range(8)]
        await asyncio.sleep(0.5)  # requests are decoding now
        seconds = await pool.update_weights(str(second_checkpoint), old + 1)
        return await asyncio.gather(*batch), seconds, old

    done, seconds, old = run(scenario())
    assert len(done) == 8 and seconds > 0
    # Paused with mode=keep: nothing aborted; each carries the version it was sent under.
    assert all(c.finish_reason in ("length", "stop") and c.token_ids for c in done)
    assert all(c.weight_version == old for c in done)
    assert run(pool.generate(PROMPT, SamplingParams(max_tokens=2))).weight_version == old + 1


def test_bad_updates_are_refused_before_pausing(pool: Any, run: Any, tmp_path: Path, second_checkpoint: Path) -> None:
    version = pool.version
    with pytest.raises(FileNotFoundError, match=f"weights_dir {tmp_path}: no \\*.safetensors"):
        run(pool.update_weights(str(tmp_path), version + 1))
    with pytest.raises(ValueError, match="older than the served version"):
        run(pool.update_weights(str(second_checkpoint), version - 1))
    assert pool.version == version and run(routes.is_paused(pool._http, pool.urls[0])) is False
