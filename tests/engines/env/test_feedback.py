"""Edit feedback: a failing edit is tested and rolled back, a passing edit ends the
episode, attempts are bounded, and demonstrations read exactly like live episodes."""

from __future__ import annotations

import random

import pytest

from engines.env.grader import GradingPool
from engines.env.session import EnvSession
from engines.env.task_sources.micro import MODULE
from engines.env.task_sources.micro_demos import feedback_messages, local_statuses, wrong_edits
from engines.rollout.step import GradeCache, pool_tester

pytestmark = [pytest.mark.sandbox]


@pytest.fixture(scope="module")
def feedback_env(env_config):
    return env_config.model_copy(update={"edit_attempts": 2})


@pytest.fixture(scope="module")
def pool(feedback_env):
    with GradingPool(feedback_env) as p:
        yield p


def _session(task, env, pool):
    return EnvSession.open(task, env, tester=pool_tester(pool, GradeCache()))


def test_failing_edits_roll_back_and_the_attempts_are_bounded(micro_tasks, feedback_env, pool):
    task = micro_tasks[3]
    (line, text), (line2, text2) = wrong_edits(task, random.Random(0), 2)
    with _session(task, feedback_env, pool) as s:
        first = s.step(f"edit {MODULE} {line}\n{text}")
        assert not first.done and first.observation.endswith("reverted (attempt 1 of 2)")
        assert s.patch() == ""  # rolled back: the file is the base again
        assert "error:" in s.step(f"edit {MODULE} 999\nx").observation  # an edit that did not apply is no attempt
        assert s.attempts == 1
        second = s.step(f"edit {MODULE} {line2}\n{text2}")
        assert second.done and second.observation.endswith("reverted (attempt 2 of 2)")
        assert s.patch() == ""


def test_a_passing_edit_ends_the_episode_and_is_kept(micro_tasks, feedback_env, pool):
    task = micro_tasks[4]
    meta = task.meta()
    with _session(task, feedback_env, pool) as s:
        result = s.step(f"edit {MODULE} {meta['line']}\n{meta['fixed_line']}")
        assert result.done and s.attempts == 1
        total = len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS)
        assert result.observation.endswith(f"{total} passed, 0 failed")
        assert s.patch() == task.patch


def test_demonstrations_show_what_the_session_shows(micro_tasks, feedback_env, pool):
    """The in-process statuses agree with the sandboxed tests, so a demonstration's
    observations are the ones a live episode would get."""
    for task in micro_tasks[5:9]:
        wrong = wrong_edits(task, random.Random(1), 1)
        messages = feedback_messages(task, 2, wrong)
        assert messages[1]["train"] is False and messages[-1].get("train", True)
        with _session(task, feedback_env, pool) as s:
            live = s.step(messages[1]["content"]).observation
        assert live == messages[2]["content"]
        line, text = wrong[0]
        lines = task.meta()["files"][MODULE].rstrip("\n").split("\n")
        statuses = local_statuses(task, "\n".join(lines[: line - 1] + [text] + lines[line:]))
        assert any(v != "PASSED" for v in statuses.values())
