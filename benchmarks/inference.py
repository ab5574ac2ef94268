"""Generation throughput through our pool, client and agent loop vs vLLM's own.

One local vLLM server (the tiny Qwen3-MoE unless --model-dir is given) serves both
paths, on the same prompts with the same sampling (temperature 1.0, one seed, eos
ignored so every request generates exactly --max-tokens tokens):

  vllm : vLLM's own batched path: all prompts in ONE /v1/completions request
         (a list of token-id prompts), which vLLM schedules as one batch;
  ours : one single-turn agent episode per prompt (AgentLoop -> ServerPool ->
         CompletionClient, token ids in and out, logprobs recorded), all episodes
         concurrent under the agent's bound; the pool coalesces their equal-sampling
         requests into multi-prompt requests (engines/inference/batching.py, on by
         default through coalesce_window_ms).

  plain: the same one-request-per-prompt pattern as ours with bare HTTP calls and
         none of our code: separates our overhead from the per-request pattern.

Rounds alternate between the paths after a warm-up of each; each path's throughput
is its total completion tokens over its total wall time. `efficiency` is ours over
vllm (target >= 0.9). Then one weight update is timed (`weight_update_s`) with the
pool's configured update mode (in-place reload by default). The last line printed is one JSON object.

    TANDEM_VLLM_PYTHON=... python -m benchmarks.inference [--prompts 64] [--max-tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.inference.config import InferenceConfig
from engines.inference.server_pool import ServerPool


@dataclass
class Done:
    observation: str = ""
    done: bool = True


class SingleTurnEnv:
    """One prompt, one model turn, no tools: the benchmark's environment."""

    def __init__(self, text: str) -> None:
        self.text = text

    def prompt(self) -> str:
        return self.text

    def step(self, action_text: str) -> Done:
        return Done()

    def patch(self) -> str:
        return ""

    def close(self) -> None:
        pass


def make_prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["def", "return", "assert", "test", "view", "edit", "a", "b", "n", "+", "-", "==", "(", ")", ":", "\n"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(8, 24))) for _ in range(n)]


class IgnoreEosAgent(AgentLoop):
    """The agent loop with eos ignored, so both paths generate the same token count."""

    def _params(self, max_tokens: int, seed: int | None, turn: int) -> Any:
        return replace(super()._params(max_tokens, seed, turn), ignore_eos=True)


async def ours(agent: AgentLoop, prompts: list[str], seed: int | None) -> tuple[int, float]:
    reqs = [
        EpisodeRequest("bench", "g", i, lambda t=text: SingleTurnEnv(t), seed=seed) for i, text in enumerate(prompts)
    ]
    start = time.perf_counter()
    episodes = await agent.run_episodes(reqs)
    seconds = time.perf_counter() - start
    bad = [e.infra_message for e in episodes if e.finish_reason == "error"]
    if bad:
        raise RuntimeError(f"{len(bad)} benchmark episodes failed: {bad[0]}")
    return sum(sum(e.loss_mask) for e in episodes), seconds


def completion_body(
    pool: ServerPool, prompt: list[int] | list[list[int]], max_tokens: int, seed: int | None
) -> dict[str, Any]:
    """A bare /v1/completions request for one prompt or many, sampled as a rollout samples."""
    return {
        "model": pool.model_name,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
        "ignore_eos": True,
        "logprobs": 0,
        "return_token_ids": True,
    }


async def vllm_batched(
    pool: ServerPool, prompt_ids: list[list[int]], max_tokens: int, seed: int | None
) -> tuple[int, float]:
    body = completion_body(pool, prompt_ids, max_tokens, seed)
    start = time.perf_counter()
    response = await pool._http.post(f"{pool.urls[0]}/v1/completions", json=body, timeout=3600)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    return sum(len(c["token_ids"]) for c in response.json()["choices"]), seconds


async def plain_requests(
    pool: ServerPool, prompt_ids: list[list[int]], max_tokens: int, seed: int | None
) -> tuple[int, float]:
    """The per-request pattern without our code: one bare HTTP request per prompt, all at once."""
    bodies = [completion_body(pool, ids, max_tokens, seed) for ids in prompt_ids]
    start = time.perf_counter()
    responses = await asyncio.gather(*(pool._http.post(f"{pool.urls[0]}/v1/completions", json=b) for b in bodies))
    seconds = time.perf_counter() - start
    return sum(len(r.json()["choices"][0]["token_ids"]) for r in responses), seconds


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix="bench-inference-"))
    model_dir = Path(args.model_dir) if args.model_dir else make_tiny_model(work / "model", seed=0)
    update_dir = make_tiny_model(work / "model-v1", seed=1) if not args.model_dir else model_dir
    cfg = InferenceConfig(
        model_dir=str(model_dir),
        max_model_len=1024,
        dtype="float32",
        kv_cache_gb=1,
        max_num_seqs=args.prompts,
        concurrency_per_server=args.prompts,
        sampling={"max_tokens_per_turn": args.max_tokens},
        limits={
            "max_turns": 1,
            "max_total_tokens": 1024,
            "max_concurrent_episodes": args.prompts,
            "wall_seconds": 3600,
        },
        log_dir=str(work / "logs"),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = make_prompts(args.prompts)
    async with ServerPool(cfg) as pool:
        agent = IgnoreEosAgent(pool, tokenizer, cfg)
        prompt_ids = [agent.encode(f"<|user|>{p}<|end|><|assistant|>") for p in prompts]
        paths = {
            "ours": lambda: ours(agent, prompts, args.seed),
            "vllm": lambda: vllm_batched(pool, prompt_ids, args.max_tokens, args.seed),
            "plain": lambda: plain_requests(pool, prompt_ids, args.max_tokens, args.seed),
        }
        totals = {name: [0, 0.0] for name in paths}
        for measure in paths.values():  # warm-up
            await measure()
        for r in range(args.rounds):
            order = list(paths) if r % 2 == 0 else list(reversed(paths))
            for name in order:
                tokens, seconds = await paths[name]()
                totals[name][0] += tokens
                totals[name][1] += seconds
        weight_update_s = await pool.update_weights(str(update_dir), 1)
        mode = pool.weights.mode
    ours_tps = totals["ours"][0] / totals["ours"][1]
    vllm_tps = totals["vllm"][0] / totals["vllm"][1]
    plain_tps = totals["plain"][0] / totals["plain"][1]
    return {
        "benchmark": "inference",
        "efficiency": round(ours_tps / vllm_tps, 4),
        "ours_tokens_per_s": round(ours_tps, 1),
        "vllm_tokens_per_s": round(vllm_tps, 1),
        "plain_requests_tokens_per_s": round(plain_tps, 1),
        "efficiency_vs_plain_requests": round(ours_tps / plain_tps, 4),
        "completion_tokens_per_round": totals["ours"][0] // args.rounds,
        "prompts": args.prompts,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "weight_update_s": round(weight_update_s, 3),
        "weight_update_mode": mode,
        "seeded": args.seed is not None,
    }


def make_tiny_model(out: Path, seed: int) -> Path:
    from engines.model.tiny import TinyModelConfig, create_tiny_model

    texts = [
        "def add(a, b):\n    return a + b\n",
        "assert is_even(2)\n",
        "edit m.py 3\n    return x - 1\n",
        "view m.py\nsubmit\n",
    ] * 50
    return create_tiny_model(out, texts, TinyModelConfig(seed=seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", help="HF causal LM to serve (default: a fresh tiny MoE)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--seed", type=int, default=0, help="sampling seed of every request; -1: unseeded (RL's default)"
    )
    args = parser.parse_args()
    args.seed = None if args.seed < 0 else args.seed
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
