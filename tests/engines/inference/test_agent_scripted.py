"""The agent loop's own logic against real micro-task sessions (sandboxed), with turns
from an in-process scripted generator instead of a vLLM server: the oracle's actions
give the oracle's demonstration conversation token for token, every request re-sends
exactly the episode so far, and the limits end episodes that do not submit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engines.env.config import EnvConfig
from engines.env.grader import grade
from engines.env.session import EnvSession
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.task_sources.micro_demos import oracle_messages
from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.model.chat_format import ChatFormat
from tests.engines.inference.conftest import small_config
from tests.engines.inference.scripted_generator import ScriptedGenerator, turn_logprob

pytestmark = pytest.mark.sandbox
FORM = "spaced_context_change"  # the run's default edit form: a view turn, the edit, submit


def _episodes(tokenizer: Any, model_dir: Path, tmp_path: Path, scripts: dict, tasks: list, **limits: Any):
    chat = ChatFormat.from_tokenizer(tokenizer, str(model_dir))
    generator = ScriptedGenerator(tokenizer, scripts, stop_id=min(chat.stop_ids))
    cfg = small_config(model_dir, limits={"max_turns": 4, "max_total_tokens": 1024, **limits})
    env_cfg = EnvConfig(scratch_dir=str(tmp_path))
    agent = AgentLoop(generator, tokenizer, cfg)
    requests = [EpisodeRequest(t.instance_id, "g0", 0, lambda t=t: EnvSession.open(t, env_cfg)) for t in tasks]
    return asyncio.run(agent.run_episodes(requests)), generator, env_cfg


def test_oracle_actions_give_the_demonstrations_conversation_token_exact(
    tokenizer: Any, tiny_model_dir: Path, tmp_path
):
    tasks = generate_micro_tasks(4, seed=31)
    demos = {t.instance_id: oracle_messages(t, FORM) for t in tasks}
    scripts = {task: [m["content"] for m in demo if m["role"] == "assistant"] for task, demo in demos.items()}
    episodes, generator, env_cfg = _episodes(tokenizer, tiny_model_dir, tmp_path, scripts, tasks)
    for ep, task in zip(episodes, tasks):
        assert not ep.infra_failure and ep.finish_reason == "submitted" and ep.num_turns == 3
        assert ep.messages == demos[task.instance_id]  # RL episodes and demonstrations share one framing
        context = ep.prompt_ids + ep.completion_ids
        assert tokenizer.decode(context, skip_special_tokens=False) == ep.conversation
        # Each request re-sent exactly the episode so far, and each turn followed its prompt.
        (session,) = [s for s in generator.prompts if s.startswith(task.instance_id + "/")]
        prompts = generator.prompts[session]
        assert len(prompts) == 3 and prompts[0] == ep.prompt_ids
        assert all(context[: len(p)] == p for p in prompts) and sorted(map(len, prompts)) == list(map(len, prompts))
        # The model's tokens are trained with their logprobs; the observations' are not.
        sampled = [(i, lp) for i, (m, lp) in enumerate(zip(ep.loss_mask, ep.completion_logprobs)) if m]
        turns = [[lp for i, lp in sampled if len(p) - len(ep.prompt_ids) <= i] for p in prompts]
        assert [t[0] for t in turns] == [turn_logprob(k, 0) for k in (1, 2, 3)]
        assert all(lp == 0.0 for m, lp in zip(ep.loss_mask, ep.completion_logprobs) if not m)
        assert ep.policy_versions == [0, 0, 0] and session in generator.released
        assert grade(task, ep.patch, env_cfg).resolved  # the fix reached the patch the grader judges


def test_episodes_that_never_submit_end_at_the_turn_limit(tokenizer: Any, tiny_model_dir: Path, tmp_path) -> None:
    tasks = generate_micro_tasks(2, seed=32)
    scripts = {t.instance_id: ["view m.py"] for t in tasks}  # views forever
    episodes, generator, _ = _episodes(tokenizer, tiny_model_dir, tmp_path, scripts, tasks, max_turns=3)
    assert [(e.finish_reason, e.num_turns, e.infra_failure) for e in episodes] == [("max_turns", 3, False)] * 2
    assert all(e.conversation.count("view m.py") == 3 for e in episodes)
    assert len(generator.released) == 2
