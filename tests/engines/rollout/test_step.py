"""One rollout step's pieces: task sampling, grading once per distinct patch, and
the rows written for the trainer."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import numpy as np
import pytest

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.session import EnvSession
from engines.env.task_sources.edit_forms import oracle_action
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import GradeResult
from engines.inference.types import Episode
from engines.protocol import render_action
from engines.rollout.step import GradeCache, episodes_table, grade_episodes, pool_tester
from storage.schema import ROLLOUTS


@pytest.fixture(scope="module")
def tasks():
    return generate_micro_tasks(12, seed=7)


class CountingPool(GradingPool):
    """The real sandboxed pool, counting how many patches it actually runs."""

    graded = 0

    def grade_many(self, items, fast=False, changes=None):
        self.graded += len(items)
        return super().grade_many(items, fast, changes)


@pytest.mark.sandbox
def test_each_distinct_patch_is_graded_once(tasks):
    task = tasks[0]
    with CountingPool(EnvConfig(workers=2)) as pool:
        cache = GradeCache()
        results = cache.grade(pool, [(task, task.patch), (task, task.patch), (task, ""), (task, task.patch)])
        assert pool.graded == 2
        assert [r.resolved for r in results] == [True, True, False, True]
        again = cache.grade(pool, [(task, "")])
        assert pool.graded == 2 and again[0].resolved is False


@pytest.mark.sandbox
@pytest.mark.parametrize("fast", [False, True])
def test_test_tool_runs_in_the_pool_and_a_later_submit_is_graded_by_pytest(tasks, fast):
    """With the plain runner off, a submit after a passing `test` is a cache hit; with
    it on, the `test` calls ran without pytest and the submit runs pytest once."""
    task = tasks[1]
    f2p, p2p = len(task.FAIL_TO_PASS), len(task.PASS_TO_PASS)
    with CountingPool(EnvConfig(workers=2, fast_test_runner=fast)) as pool:
        cache = GradeCache()
        with EnvSession.open(task, pool.config, tester=pool_tester(pool, cache)) as session:
            before = session.step("test").observation.split("\n")
            assert before[0] == f"{p2p} passed, {f2p} failed"
            assert before[1:] == [f"FAILED {t}" for t in sorted(task.FAIL_TO_PASS)][:4]
            session.step(render_action(oracle_action(task)))
            assert session.step("test").observation == f"{f2p + p2p} passed, 0 failed"
            patch = session.patch()
        assert pool.graded == 2
        final = cache.grade(pool, [(task, patch)])[0]
        assert final.resolved and final.runner == "pytest" and pool.graded == 2 + fast
        again = cache.grade(pool, [(task, patch)], fast=True)[0]  # a hit, whichever runner answered first
        assert again.report == final.report and pool.graded == 2 + fast


def _episode(task_id: str, group: str, i: int, infra: bool = False) -> Episode:
    now = datetime.now(UTC)
    return Episode(
        task_id=task_id,
        group_id=group,
        sample_index=i,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5, 6, 7],
        loss_mask=[True, True, False, True],
        completion_logprobs=[-0.1, -0.2, 0.0, -0.3],
        policy_versions=[2, 3],
        num_turns=2,
        finish_reason="error" if infra else "submitted",
        started_at=now,
        finished_at=now,
        conversation="...",
        infra_failure=infra,
        infra_message="server died" if infra else "",
        routed_experts=np.arange(6 * 4 * 2).reshape(6, 4, 2) % 8,
    )


def test_rows_carry_rewards_and_leave_advantages_to_the_trainer(tasks):
    t = tasks[0]
    eps = [_episode(t.instance_id, "g", i, infra=(i == 3)) for i in range(4)]
    rewards = [1.0, 0.0, 0.0, 1.0]
    grades = [GradeResult(r == 1.0, r, int(r), 1, 0, 0, {"t": "PASSED"}) for r in rewards]
    grades[3] = grade_episodes(None, GradeCache(), [(t, eps[3])])[0]  # an infra failure is never graded
    table = episodes_table("run", 5, [t] * 4, eps, grades)
    assert table.schema.equals(ROLLOUTS, check_metadata=False)
    rows = table.to_pylist()
    assert [r["reward"] for r in rows[:3]] == [1.0, 0.0, 0.0]
    # The trainer computes advantages (engines/trainer/advantages.py) and records them itself.
    assert all(r["advantage"] is None for r in rows)
    assert rows[3]["infra_failure"] and math.isnan(rows[3]["reward"])
    assert rows[0]["min_policy_version"] == 2 and rows[0]["num_completion_tokens"] == 4
    routes = np.frombuffer(rows[0]["routed_experts"], np.uint8).reshape(rows[0]["routed_experts_shape"])
    assert (routes == eps[0].routed_experts).all()
    assert json.loads(rows[0]["test_report"]) == {"t": "PASSED"}
