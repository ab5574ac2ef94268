"""The agent loop on real-shaped tasks (tests/real_project.py) with turns from the scripted
generator: a fix that needs two edits, assembled under kept feedback, ends the episode
and reaches the grade; a run whose prompts cannot fit its token budget is refused with
the measured lengths before any server starts."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engines.env.config import EnvConfig
from engines.env.grader import grade
from engines.env.session import EnvSession
from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.model.chat_format import ChatFormat
from engines.rollout.prompt_fit import check_prompts_fit, prompt_lengths
from tests.engines.inference.conftest import small_config
from tests.engines.inference.scripted_generator import ScriptedGenerator
from tests.real_project import ADD_BUG, SOURCE, TOTAL_BUG, two_edit_task, write_project

pytestmark = pytest.mark.corpus


def _replace(old_new: tuple[str, str]) -> str:
    return f"replace {SOURCE}\n{old_new[1]}\n=====\n{old_new[0]}"


@pytest.mark.sandbox
def test_a_two_edit_fix_through_the_agent_loop_resolves_a_real_shaped_task(
    tokenizer: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    task = two_edit_task(write_project(tmp_path / "shop"))
    script = [f"view {SOURCE} Stock.add", _replace(ADD_BUG), _replace(TOTAL_BUG), "submit"]
    chat = ChatFormat.from_tokenizer(tokenizer, str(tiny_model_dir))
    generator = ScriptedGenerator(tokenizer, {task.instance_id: script}, stop_id=min(chat.stop_ids))
    limits = {"max_turns": 6, "max_total_tokens": 1024, "max_observation_tokens": 512}
    cfg = small_config(tiny_model_dir, limits=limits, sampling={"max_tokens_per_turn": 128})
    env_cfg = EnvConfig(scratch_dir=str(tmp_path / "scratch"), edit_attempts=3, feedback="keep")
    request = EpisodeRequest(task.instance_id, "g0", 0, lambda: EnvSession.open(task, env_cfg))
    (episode,) = asyncio.run(AgentLoop(generator, tokenizer, cfg).run_episodes([request]))
    assert not episode.infra_failure and episode.finish_reason == "submitted" and episode.num_turns == 3
    observations = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert observations[0].startswith("8     def add(self, name, count):")
    assert observations[1].endswith("kept (attempt 1 of 3); undo reverts it")  # the first edit stays
    assert tokenizer.decode(episode.prompt_ids + episode.completion_ids, skip_special_tokens=False) == (
        episode.conversation
    )
    assert grade(task, episode.patch, env_cfg).resolved


def test_a_run_whose_prompts_cannot_fit_is_refused_with_their_lengths(tokenizer: Any, tiny_model_dir: Path) -> None:
    chat = ChatFormat.from_tokenizer(tokenizer, str(tiny_model_dir))
    task = two_edit_task(Path("/nonexistent"))  # only the statement is read
    long = replace(task, instance_id="long", problem_statement=task.problem_statement * 12)
    lengths = prompt_lengths(chat, [task, long])
    assert lengths[0] < lengths[1]
    check_prompts_fit(chat, [task], max_total_tokens=lengths[0] + 64, turn_tokens=64)  # fits: no error
    with pytest.raises(ValueError) as refused:
        check_prompts_fit(chat, [task, long], max_total_tokens=lengths[0] + 64, turn_tokens=64)
    message = str(refused.value)
    assert message.startswith("1 of 2 task prompts leave no room for a 64-token turn")
    assert f"max {lengths[1]}" in message and f"long ({lengths[1]})" in message
    assert f"at least {lengths[1] + 64}" in message and "inference.limits.max_total_tokens" in message
