"""Prefill/decode disaggregation against real vLLM CPU servers (ExampleConnector), and
the join of prefill and decode routes for router replay."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from engines.inference import launch
from engines.inference.disaggregation import join_routes
from engines.inference.types import SamplingParams

from .conftest import small_config

pytestmark = pytest.mark.cluster


def test_routes_join_prompt_from_prefill_and_completion_from_decode() -> None:
    layers, top_k, prompt_rows, completion = 3, 2, 5, 4
    prefill = np.full((prompt_rows, layers, top_k), 1, dtype=np.uint8)  # prompt rows (+ nothing generated)
    decode = np.zeros((prompt_rows + completion - 1, layers, top_k), dtype=np.uint8)
    decode[prompt_rows:] = 2  # the decode server never routed the prompt: only its tail is real
    joined = join_routes(prefill, decode, prompt_rows, completion)
    assert joined.shape == (prompt_rows + completion - 1, layers, top_k)
    assert (joined[:prompt_rows] == 1).all() and (joined[prompt_rows:] == 2).all()
    # A decode server that returns the generated positions only joins the same way.
    assert (join_routes(prefill, decode[prompt_rows:], prompt_rows, completion) == joined).all()
    with pytest.raises(ValueError, match="routes do not join"):
        join_routes(prefill[:2], decode, prompt_rows, completion)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(1200)  # two servers start side by side on a shared 2-core host
def test_prefill_then_decode_on_cpu_servers_is_token_exact(
    vllm_available: str, tiny_model_dir: Path, second_checkpoint: Path, tmp_path: Path
) -> None:
    from engines.inference.server_pool import ServerPool

    kv = tmp_path / "kv"
    cfg = small_config(
        tiny_model_dir,
        log_dir=str(tmp_path / "logs"),
        startup_timeout_s=900,
        cluster={"disaggregation": {"kv_connector": "ExampleConnector", "shared_storage_path": str(kv)}},
    )
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(10, 200, size=300)]  # several KV blocks (32 tokens on CPU)
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=7)

    async def scenario() -> None:
        async with ServerPool(cfg) as pool:
            prefill, decode = pool.slots
            assert (prefill.role, decode.role) == ("kv_producer", "kv_consumer")
            for version in (0, 1):
                if version:  # both servers take the new weights (stale prefill KV would change the logprobs)
                    await pool.update_weights(str(second_checkpoint), 1)
                out = await pool.generate(prompt, params, session_id=f"s{version}")
                assert out.server_url == decode.url and out.weight_version == version
                # The same request served whole by one server: what an undisaggregated pool returns.
                alone = await pool.client.complete(prefill.url, prompt, params)
                assert out.token_ids == alone.token_ids
                np.testing.assert_allclose(out.logprobs, alone.logprobs, atol=1e-5)
            assert decode.process is not None
            log = decode.process.log_path.read_text()
            # The connector moves the prompt's full KV blocks; the decode server computes the rest.
            full_blocks = len(prompt) // launch.CPU_BLOCK_MULTIPLE * launch.CPU_BLOCK_MULTIPLE
            assert f"Inject KV cache of {full_blocks} tokens" in log, "the decode server computed the prompt itself"
            assert any(kv.iterdir())

    asyncio.run(scenario())
