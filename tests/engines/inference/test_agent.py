"""Multi-turn episodes on a real vLLM CPU server, driven against small test environments.

The environments here are test doubles of the environment side only (they count
turns and echo); the model side is the real server. To check token exactness both
ways, sampling is restricted to the tokens "Q", "Z" (which the tokenizer never
merges: they never occur in its training text) and optionally "<|end|>", so the
model's ids are also the canonical tokenisation of its text.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.protocol import ASSISTANT, END, TOOL
from tests.engines.inference.conftest import small_config

pytestmark = pytest.mark.vllm


@dataclass
class Step:
    observation: str
    done: bool


class CountingTestEnv:
    """Test environment: submits after `submit_after` turns, echoes each action's length."""

    open_now = 0
    open_max = 0
    lock = threading.Lock()

    def __init__(
        self, submit_after: int = 2, step_sleep_s: float = 0.0, fail_on_step: bool = False, prompt_text: str = "fix add"
    ) -> None:
        self.submit_after = submit_after
        self.step_sleep_s = step_sleep_s
        self.fail_on_step = fail_on_step
        self.prompt_text = prompt_text
        self.turns = 0
        self.closed = False
        with CountingTestEnv.lock:
            CountingTestEnv.open_now += 1
            CountingTestEnv.open_max = max(CountingTestEnv.open_max, CountingTestEnv.open_now)

    def prompt(self) -> str:
        return self.prompt_text

    def step(self, action_text: str) -> Step:
        if self.fail_on_step:
            raise OSError("sandbox vanished")
        time.sleep(self.step_sleep_s)
        self.turns += 1
        return Step(f"turn {self.turns}: {len(action_text)} chars", self.turns >= self.submit_after)

    def patch(self) -> str:
        return f"patch after {self.turns} turns"

    def close(self) -> None:
        self.closed = True
        with CountingTestEnv.lock:
            CountingTestEnv.open_now -= 1


def agent_for(pool: Any, tokenizer: Any, model_dir: Path, with_eos: bool, **cfg: Any) -> AgentLoop:
    allowed = [tokenizer.convert_tokens_to_ids(t) for t in ("Q", "Z")]
    if with_eos:
        allowed.append(tokenizer.convert_tokens_to_ids(END))
    return AgentLoop(pool, tokenizer, small_config(model_dir, **cfg), allowed_token_ids=allowed)


def masked_runs(ep: Any) -> list[list[int]]:
    runs, current = [], []
    for tid, model_token in zip(ep.completion_ids, ep.loss_mask):
        if not model_token:
            current.append(tid)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


@pytest.mark.parametrize("with_eos", [True, False], ids=["turns-end-at-eos", "turns-cut-by-length"])
def test_multi_turn_episodes_are_token_exact(
    pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path, with_eos: bool
) -> None:
    agent = agent_for(pool, tokenizer, tiny_model_dir, with_eos)
    reqs = [EpisodeRequest("task-a", "g0", i, lambda: CountingTestEnv(submit_after=3), seed=10 + i) for i in range(4)]
    for ep in run(agent.run_episodes(reqs)):
        ids = ep.prompt_ids + ep.completion_ids
        assert ep.finish_reason == "submitted" and ep.num_turns == 3 and not ep.infra_failure
        assert ep.prompt_ids == tokenizer.encode("<|user|>fix add<|end|><|assistant|>", add_special_tokens=False)
        assert tokenizer.decode(ids, skip_special_tokens=False) == ep.conversation  # ids -> text
        assert tokenizer.encode(ep.conversation, add_special_tokens=False) == ids  # text -> ids
        assert len(ep.loss_mask) == len(ep.completion_logprobs) == len(ep.completion_ids)
        assert all((lp < 0) if m else (lp == 0.0) for m, lp in zip(ep.loss_mask, ep.completion_logprobs))
        observations = masked_runs(ep)
        assert len(observations) == 2  # no observation after the submitting turn
        for k, run_ids in enumerate(observations, start=1):
            text = tokenizer.decode(run_ids, skip_special_tokens=False)
            prefix = "" if with_eos and text.startswith(TOOL) else END
            assert text.startswith(prefix + TOOL + f"turn {k}: ") and text.endswith(END + ASSISTANT)
        assert ep.policy_versions == [pool.version] * 3
        assert ep.patch == "patch after 3 turns" and ep.started_at < ep.finished_at
        assert ep.started_at.tzinfo is not None and ep.generation_s > 0


def test_every_episode_gets_a_finish_reason(pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path) -> None:
    long_prompt = "def add(a, b):\n    return a - b\n" * 200
    cases = {
        "submitted": (CountingTestEnv, {"submit_after": 1}, {}),
        "max_turns": (CountingTestEnv, {"submit_after": 99}, {"limits": {"max_turns": 2, "max_total_tokens": 512}}),
        "max_tokens": (CountingTestEnv, {"submit_after": 99}, {"limits": {"max_turns": 50, "max_total_tokens": 80}}),
        "timeout": (CountingTestEnv, {"step_sleep_s": 3.0}, {"limits": {"wall_seconds": 1.0}}),
        "env-error": (CountingTestEnv, {"fail_on_step": True}, {}),
        "long-prompt": (CountingTestEnv, {"prompt_text": long_prompt}, {}),
    }
    results = {}
    for name, (cls, env_kwargs, cfg) in cases.items():
        agent = agent_for(pool, tokenizer, tiny_model_dir, with_eos=False, **cfg)
        results[name] = run(agent.run_episode(EpisodeRequest(name, "g", 0, lambda: cls(**env_kwargs), seed=1)))
    assert results["submitted"].finish_reason == "submitted" and results["submitted"].num_turns == 1
    assert results["max_turns"].finish_reason == "max_turns" and results["max_turns"].num_turns == 2
    ep = results["max_tokens"]
    assert ep.finish_reason == "max_tokens" and len(ep.prompt_ids) + len(ep.completion_ids) <= 80
    assert results["timeout"].finish_reason == "timeout" and results["timeout"].patch.startswith(
        "patch after"
    )  # read even on timeout
    failed = results["env-error"]
    assert failed.finish_reason == "error" and failed.infra_failure and "sandbox vanished" in failed.infra_message
    too_long = results["long-prompt"]
    assert too_long.finish_reason == "error" and not too_long.infra_failure
    assert "prompt of task long-prompt has" in too_long.infra_message and too_long.num_turns == 0


def test_concurrent_episodes_respect_the_bound_and_close_their_envs(
    pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    CountingTestEnv.open_max = 0
    envs: list[CountingTestEnv] = []

    def make() -> CountingTestEnv:
        envs.append(CountingTestEnv(submit_after=2, step_sleep_s=0.05))
        return envs[-1]

    agent = agent_for(pool, tokenizer, tiny_model_dir, with_eos=True, limits={"max_concurrent_episodes": 3})
    episodes = run(agent.run_episodes([EpisodeRequest("t", "g", i, make) for i in range(9)]))
    assert [e.sample_index for e in episodes] == list(range(9))
    assert all(e.finish_reason == "submitted" for e in episodes)
    assert 2 <= CountingTestEnv.open_max <= 3
    assert len(envs) == 9 and all(env.closed for env in envs) and CountingTestEnv.open_now == 0


class BarrierEnv(CountingTestEnv):
    """Its first step blocks until `parties` episodes are inside a step at once."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__(submit_after=1)
        self.barrier = barrier

    def step(self, action_text: str) -> Step:
        self.barrier.wait()
        return super().step(action_text)


def test_blocked_environment_calls_do_not_hold_other_episodes_back(
    pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    # 12 episodes blocked in their environment at once: more than asyncio's default
    # thread pool holds on a small machine (cores + 4), where the 12th would never start.
    barrier = threading.Barrier(12, timeout=60)
    agent = agent_for(pool, tokenizer, tiny_model_dir, with_eos=True, limits={"max_concurrent_episodes": 12})
    episodes = run(agent.run_episodes([EpisodeRequest("t", "g", i, lambda: BarrierEnv(barrier)) for i in range(12)]))
    assert [e.finish_reason for e in episodes] == ["submitted"] * 12, episodes[0].infra_message
