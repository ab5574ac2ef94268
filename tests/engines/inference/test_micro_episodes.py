"""Real micro bug-fix episodes: the agent loop driving engines.env's EnvSession
against the vLLM server (random weights, so the model's turns are mostly malformed
actions, which the environment must turn into error observations)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engines.inference.agent import AgentLoop, EpisodeRequest
from tests.engines.inference.conftest import small_config

pytestmark = [pytest.mark.vllm, pytest.mark.sandbox]


def test_micro_task_episodes_run_token_exact_through_env_sessions(
    pool: Any, run: Any, tokenizer: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from engines.env.config import EnvConfig
    from engines.env.session import EnvSession
    from engines.env.task_sources.micro import generate_micro_tasks

    env_cfg = EnvConfig(scratch_dir=str(tmp_path))
    tasks = generate_micro_tasks(3, seed=7)
    cfg = small_config(
        tiny_model_dir, sampling={"max_tokens_per_turn": 24}, limits={"max_turns": 3, "max_total_tokens": 1000}
    )
    agent = AgentLoop(pool, tokenizer, cfg)
    reqs = [
        EpisodeRequest(t.instance_id, "g0", k, lambda t=t: EnvSession.open(t, env_cfg), seed=k)
        for t in tasks
        for k in range(2)
    ]
    episodes = run(agent.run_episodes(reqs))
    assert len(episodes) == 6 and not any(e.infra_failure for e in episodes)
    for ep, task in zip(episodes, [t for t in tasks for _ in range(2)]):
        assert ep.task_id == task.instance_id
        assert ep.finish_reason in ("submitted", "max_turns", "max_tokens")
        assert ep.prompt_ids == tokenizer.encode(
            f"<|user|>{task.problem_statement}<|end|><|assistant|>", add_special_tokens=False
        )
        assert tokenizer.decode(ep.prompt_ids + ep.completion_ids, skip_special_tokens=False) == ep.conversation
        assert len(ep.policy_versions) == ep.num_turns >= 1
        assert all(lp == 0.0 for lp, m in zip(ep.completion_logprobs, ep.loss_mask) if not m)
        assert isinstance(ep.patch, str)
        if ep.finish_reason == "max_turns":  # every turn but a submit got an observation from the env
            assert ep.conversation.count("<|tool|>") >= ep.num_turns - 1
    sessions = tmp_path / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir())  # every workspace destroyed on close
