"""Alarms of a rollout step (engines/rollout/step.py): a step in which no episode made
a valid action is written with a warning line and `valid_action_share` 0.0, which
reaches the `steps` table; a step in which no episode generated a token is an error
naming what its episodes ended on; a step whose hack rate is above env.hack_rate_warn
is written with a warning line naming the rules flagged most. The real agent loop and
micro-task sessions, turns from the scripted generator, grades from a stand-in (nothing
is ever submitted)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from engines.env.config import EnvConfig
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import GradeResult
from engines.inference.agent import AgentLoop
from engines.inference.types import Episode
from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from engines.rollout.records import rollouts_table
from engines.rollout.step import GradeCache, NoTokensGenerated, check_generated, run_step, warn_on_hack_rate
from engines.step_metrics import episode_metrics
from storage import layout
from storage.fs import open_store
from storage.parquet_io import read_table
from storage.tables import write_step_metrics
from tests.engines.inference.conftest import small_config
from tests.engines.inference.scripted_generator import ScriptedGenerator


class Grader:
    """Stand-in for GradingPool: no patch resolves its task; every final grade carries `flags`."""

    def __init__(self, flags: tuple[str, ...] = ()) -> None:
        self.flags = flags

    def grade_many(self, items, fast: bool = False, changes=None) -> list[GradeResult]:
        return [GradeResult(False, 0.0, 0, 1, 0, 0, {}, flags=() if fast else self.flags) for _ in items]


def step(
    tiny_model_dir: Path,
    tmp_path: Path,
    script: list[str],
    grader: Grader | None = None,
    env: dict[str, Any] | None = None,
    **limits: Any,
) -> pa.Table:
    """Step 1 (served version 0) of 2 tasks x 2 samples whose every turn is the next of
    `script`, graded by `grader` (nothing flagged by default); `env`: EnvConfig changes."""
    tasks = generate_micro_tasks(2, seed=11)
    tok = load_tokenizer(tiny_model_dir)
    generator = ScriptedGenerator(
        tok, {t.instance_id: script for t in tasks}, stop_id=ChatFormat.from_tokenizer(tok).end_id
    )
    agent = AgentLoop(generator, tok, small_config(tiny_model_dir, limits={"max_turns": 2, **limits}))
    config = EnvConfig(scratch_dir=str(tmp_path / "scratch"), **(env or {}))
    pool = grader or Grader()
    result = asyncio.run(run_step(agent, pool, GradeCache(), config, "r", 1, tasks, 2, 1))  # type: ignore[arg-type]
    return result.table


def test_a_step_without_a_valid_action_warns_and_records_a_zero_share(tiny_model_dir, tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        table = step(tiny_model_dir, tmp_path, ["<think>\nwhat now"])  # reasoning the tiny format never closes
    assert table.num_rows == 4 and table.column("valid_actions").to_pylist() == [0, 0, 0, 0]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("step 1: no episode made a valid action (4 episodes, 8 model turns)")
    assert "your reasoning was never closed" in warning  # the first observation says what went wrong
    metrics = episode_metrics(table, 1)
    assert metrics["valid_action_share"] == 0.0
    # The trainer lane stores it in the step's row of the `steps` table.
    store = open_store(str(tmp_path / "lake"))
    write_step_metrics(store, "r", 1, {**metrics, "policy_version": 2})
    row = read_table(store, store.path(layout.steps_file("r", 1))).to_pylist()[0]
    assert dict(row["extra"])["valid_action_share"] == 0.0


def test_a_step_with_valid_actions_counts_them_and_does_not_warn(tiny_model_dir, tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        table = step(tiny_model_dir, tmp_path, ["view m.py", "bogus"])
    assert table.column("valid_actions").to_pylist() == [1, 1, 1, 1]
    assert episode_metrics(table, 1)["valid_action_share"] == 1.0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_step_in_which_no_episode_generated_a_token_is_an_error_naming_why(tiny_model_dir, tmp_path) -> None:
    message = (
        r"step 1: none of its 4 episodes generated a token\. Finish reasons: error x4\. Messages: "
        r"'episode .*: prompt of task .* has \d+ tokens; limits.max_total_tokens is 16"
    )
    with pytest.raises(NoTokensGenerated, match=message):
        step(tiny_model_dir, tmp_path, ["view m.py"], max_total_tokens=16)  # every prompt is longer


def test_a_step_of_harness_failures_only_is_written_as_such() -> None:
    """Infra failures are flagged rows, left out of the metrics; the alarm is for the rest."""
    failed = Episode("t", "g", 0, finish_reason="error", infra_failure=True, infra_message="server gone")
    check_generated(0, [failed, failed])
    talked = Episode("t", "g", 1, completion_ids=[5, 6], loss_mask=[True, False], finish_reason="max_turns")
    check_generated(0, [failed, talked])
    with pytest.raises(NoTokensGenerated, match="Finish reasons: error x1, max_turns x1. Messages: 'server gone'"):
        check_generated(0, [failed, Episode("t", "g", 2, finish_reason="max_turns")])


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_step_of_flagged_episodes_warns_with_the_rules(tiny_model_dir, tmp_path, caplog) -> None:
    """The default env.hack_rate_warn (0.05) through run_step: every episode flagged."""
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        table = step(tiny_model_dir, tmp_path, ["view m.py"], Grader(("test_framework", "builtins")))
    assert episode_metrics(table, 1)["hack_rate"] == 1.0
    (warning,) = warnings(caplog)
    assert warning.startswith("step 1: hack rate 1.000 is above env.hack_rate_warn = 0.050; rules flagged most: ")
    assert "test_framework x4" in warning and "builtins x4" in warning
    assert "env.hack_policy = 'zero_reward'" in warning


def test_env_hack_rate_warn_sets_the_threshold(tiny_model_dir, tmp_path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        table = step(tiny_model_dir, tmp_path, ["view m.py"], Grader(("atexit",)), env={"hack_rate_warn": 1.0})
    assert episode_metrics(table, 1)["hack_rate"] == 1.0 and not warnings(caplog)


def flagged_step(flagged: int, clean: int, infra: int = 0) -> pa.Table:
    """A rollouts table of step 1: `flagged` episodes with rules, `clean` ones without, `infra` harness failures."""
    rules = [["equality_dunder"], ["equality_dunder", "sys_modules"], ["sys_modules"], ["equality_dunder"]]
    rows = [{"hack_flags": rules[i % len(rules)]} for i in range(flagged)] + [{"hack_flags": []}] * clean
    rows += [{"hack_flags": [], "infra_failure": True}] * infra
    return rollouts_table([{"run_id": "r", "step": 1, "task_id": "t", **row} for row in rows])


def test_the_warning_names_the_rules_seen_most_first(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        assert warn_on_hack_rate(1, flagged_step(4, 4), 0.05, "record")
    (warning,) = warnings(caplog)
    assert "hack rate 0.500" in warning and "rules flagged most: equality_dunder x3, sys_modules x2." in warning
    assert "env.hack_policy = 'record'" in warning


def test_a_strict_judge_rejection_is_named_as_a_wrong_fix_the_tests_let_through(caplog) -> None:
    table = rollouts_table([{"run_id": "r", "step": 1, "task_id": "t", "hack_flags": ["strict_judge"]}] * 2)
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        assert warn_on_hack_rate(1, table, 0.05, "zero_reward")
    (warning,) = warnings(caplog)
    assert "strict_judge x2 (strict_judge: the tests pass but the code computes other values" in warning


def test_a_hack_rate_at_or_below_the_threshold_does_not_warn(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engines.rollout.step"):
        assert not warn_on_hack_rate(1, flagged_step(1, 19), 0.05, "zero_reward")  # exactly 0.05
        assert not warn_on_hack_rate(1, flagged_step(0, 4), 0.0, "zero_reward")
        assert not warn_on_hack_rate(1, flagged_step(0, 0, infra=3), 0.0, "zero_reward")  # nothing graded
        assert warn_on_hack_rate(1, flagged_step(1, 18, infra=5), 0.05, "zero_reward")  # 1 of 19 graded
    assert len(warnings(caplog)) == 1
