"""Coalesced requests on a real vLLM CPU server: the same samples as one by one, each
caller its own, a bad prompt failing only its caller."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engines.inference.client import RequestRejected
from engines.inference.types import Completion, SamplingParams

pytestmark = pytest.mark.vllm

PROMPTS = [[1, 40 + i, 41, 42 + 2 * i, 43, 4, 2] for i in range(6)]


async def coalesced_and_alone(pool: Any, params: SamplingParams) -> tuple[list[Completion], list[Completion], int]:
    before = pool.batcher.batches_sent
    together = await asyncio.gather(*(pool.generate(p, params, f"s{i}") for i, p in enumerate(PROMPTS)))
    batches = pool.batcher.batches_sent - before
    alone = [await pool.client.complete(pool.urls[0], p, params, pool.version, retries=0) for p in PROMPTS]
    return together, alone, batches


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=16, seed=11), SamplingParams(max_tokens=16, temperature=0.0)],
    ids=["seeded", "greedy"],
)
def test_coalesced_requests_equal_the_same_requests_sent_one_by_one(
    pool: Any, run: Any, params: SamplingParams
) -> None:
    together, alone, batches = run(coalesced_and_alone(pool, params))
    assert batches >= 1  # they did share a request
    for t, a in zip(together, alone):
        assert t.token_ids == a.token_ids and t.finish_reason == a.finish_reason
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert t.weight_version == a.weight_version == pool.version and t.server_url == pool.urls[0]
    assert len({tuple(t.token_ids) for t in together}) > 1  # each caller got its own prompt's choice


def test_requests_with_different_seeds_are_sent_alone(pool: Any, run: Any) -> None:
    before = pool.batcher.batches_sent

    async def scenario() -> list[Completion]:
        return await asyncio.gather(
            *(pool.generate(PROMPTS[0], SamplingParams(max_tokens=4, seed=s)) for s in range(4))
        )

    assert all(len(c.token_ids) == 4 for c in run(scenario()))
    assert pool.batcher.batches_sent == before


def test_a_rejected_prompt_fails_only_its_caller(pool: Any, run: Any) -> None:
    params = SamplingParams(max_tokens=4, seed=2)

    async def scenario() -> list[Any]:
        prompts = [*PROMPTS[:3], [5] * 1100]  # the last is longer than the context
        return await asyncio.gather(*(pool.generate(p, params) for p in prompts), return_exceptions=True)

    *good, bad = run(scenario())
    assert all(isinstance(c, Completion) and len(c.token_ids) == 4 for c in good)
    assert isinstance(bad, RequestRejected) and "rejected a 1100-token prompt" in str(bad)
