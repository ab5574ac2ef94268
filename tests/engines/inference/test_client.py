"""Token-in/token-out generation against a real vLLM CPU server."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from engines.inference.client import CompletionClient, RequestRejected, ServerUnavailable
from engines.inference.types import SamplingParams

pytestmark = pytest.mark.vllm


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(f"<|user|>{text}<|end|><|assistant|>", add_special_tokens=False)


def test_generation_returns_ids_and_logprobs_of_the_served_model(
    pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    from transformers import AutoModelForCausalLM

    prompt = prompt_ids(tokenizer, "def add(a, b):\n    return a - b\n")
    out = run(pool.generate(prompt, SamplingParams(max_tokens=24, seed=7)))
    assert 1 <= len(out.token_ids) <= 24 and len(out.logprobs) == len(out.token_ids)
    assert (
        out.finish_reason in ("stop", "length")
        and out.server_url == pool.urls[0]
        and out.weight_version == pool.version
    )
    # The logprobs are the served policy's: recompute them with transformers on the same ids.
    model = AutoModelForCausalLM.from_pretrained(pool.weights_dir or tiny_model_dir)
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    expected = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(out.token_ids)]
    assert all(math.isfinite(x) and x <= 0 for x in out.logprobs)
    assert max(abs(a - b) for a, b in zip(out.logprobs, expected)) < 1e-3


def test_seeds_make_samples_reproducible(pool: Any, run: Any, tokenizer: Any) -> None:
    prompt = prompt_ids(tokenizer, "def is_even(n):")
    a, b, c = (run(pool.generate(prompt, SamplingParams(max_tokens=16, seed=s))) for s in (1, 1, 2))
    assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert a.token_ids != c.token_ids


def test_stop_at_eos_keeps_the_eos_id(pool: Any, run: Any, tokenizer: Any) -> None:
    eos = tokenizer.convert_tokens_to_ids("<|end|>")
    out = run(pool.generate(prompt_ids(tokenizer, "x"), SamplingParams(max_tokens=8, allowed_token_ids=(eos,))))
    assert out.token_ids == [eos] and out.finish_reason == "stop"


def test_prompt_longer_than_the_context_names_the_server(pool: Any, run: Any) -> None:
    with pytest.raises(RequestRejected, match=f"server {pool.urls[0]} rejected a 1100-token prompt"):
        run(pool.generate([5] * 1100, SamplingParams(max_tokens=4)))


def test_unanswering_server_fails_after_bounded_retries(run: Any) -> None:
    async def call() -> None:
        async with httpx.AsyncClient() as http:
            client = CompletionClient(http, "policy", timeout_s=2, retries=2, backoff_s=0.01)
            await client.complete("http://127.0.0.1:9", [1, 2], SamplingParams(max_tokens=2))

    with pytest.raises(ServerUnavailable, match=r"server http://127.0.0.1:9 unavailable after 3 attempt\(s\)"):
        run(call())
