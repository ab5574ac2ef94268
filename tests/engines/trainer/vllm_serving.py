"""An exported checkpoint served as a run serves it (ServerPool: the pool's own vLLM
command line and environment), and the logprobs transformers computes on the same
files, for the export tests to compare."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import torch

from engines.inference.config import EpisodeLimits, InferenceConfig, SamplingConfig
from engines.inference.server_pool import ServerPool
from engines.model.load import load_moe_causal_lm, load_tokenizer


def served_greedy_logprobs(
    model_dir: str,
    prompt_ids: list[int],
    max_tokens: int,
    max_model_len: int,
    log_dir: Path,
    startup_timeout_s: float = 300.0,
    dtype: str = "float32",  # 'auto' would serve float32 weights as bfloat16 on the CPU build
) -> tuple[list[int], list[float]]:
    """Greedy tokens after `prompt_ids` and their served logprobs, from one local vLLM
    server on `model_dir` (its log: `log_dir/server-0.log`). Raises ServerStartError
    when the server does not come up."""
    cfg = InferenceConfig(
        model_dir=model_dir,
        max_model_len=max_model_len,
        dtype=dtype,
        limits=EpisodeLimits(max_total_tokens=max_model_len),
        sampling=SamplingConfig(max_tokens_per_turn=max_tokens),
        startup_timeout_s=startup_timeout_s,
        log_dir=str(log_dir),
    )
    body = {
        "model": cfg.served_model_name,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": 1,
        "return_token_ids": True,
    }
    choice = asyncio.run(_complete(cfg, body))
    ids = choice.get("token_ids") or load_tokenizer(model_dir).convert_tokens_to_ids(choice["logprobs"]["tokens"])
    return list(ids), choice["logprobs"]["token_logprobs"][: len(ids)]


async def _complete(cfg: InferenceConfig, body: dict) -> dict:
    async with ServerPool(cfg) as pool, httpx.AsyncClient(timeout=120) as http:
        resp = await http.post(f"{pool.urls[0]}/v1/completions", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()["choices"][0]


def transformers_logprobs(model_dir: str, prompt_ids: list[int], ids: list[int]) -> list[float]:
    """The logprob of each of `ids` after `prompt_ids`, computed by transformers on `model_dir`."""
    model = load_moe_causal_lm(model_dir).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float(), -1)
    return [logp[len(prompt_ids) - 1 + i, t].item() for i, t in enumerate(ids)]
