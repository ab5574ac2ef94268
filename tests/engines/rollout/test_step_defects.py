"""Defects found by trying the system as a sceptical user: a grade cache that raised
KeyError once it passed its size, and step metrics that infra failures made NULL
(reward_mean) or dragged down (pass_rate)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.micro import generate_micro_tasks
from engines.rollout.step import GradeCache
from engines.step_metrics import episode_metrics
from tests.storage.conftest import make_episodes


@pytest.mark.sandbox
def test_a_full_cache_answers_a_call_that_mixes_hits_and_new_patches() -> None:
    task = generate_micro_tasks(2, seed=3)[0]
    with GradingPool(EnvConfig(workers=1)) as pool:
        cache = GradeCache(max_entries=1)
        assert cache.grade(pool, [(task, task.patch)])[0].resolved
        # One hit and one new patch: the new entry pushes the cache past its size.
        results = cache.grade(pool, [(task, task.patch), (task, "")])
    assert [r.resolved for r in results] == [True, False]
    assert len(cache.results) == 1


def _with_infra_failure(table: pa.Table, index: int) -> pa.Table:
    rows = table.to_pylist()
    rows[index].update(infra_failure=True, reward=math.nan, resolved=False)
    return pa.Table.from_pylist(rows, schema=table.schema)


def test_step_metrics_leave_infra_failures_out() -> None:
    table = make_episodes("r", 2, 8, seed=1)
    rows = table.to_pylist()
    for i, r in enumerate(rows):
        r.update(reward=float(i % 2), resolved=bool(i % 2))
    table = _with_infra_failure(pa.Table.from_pylist(rows, schema=table.schema), 0)
    metrics = episode_metrics(table, 2)
    # Seven graded episodes, four of them (1, 3, 5, 7) resolved.
    assert metrics["reward_mean"] == pytest.approx(4 / 7)
    assert metrics["pass_rate"] == pytest.approx(4 / 7)


def test_a_step_of_infra_failures_only_has_no_reward_mean() -> None:
    table = make_episodes("r", 0, 2)
    table = _with_infra_failure(_with_infra_failure(table, 0), 1)
    metrics = episode_metrics(table, 0)
    assert metrics["reward_mean"] is None and metrics["pass_rate"] is None
