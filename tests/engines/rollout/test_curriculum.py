"""Which tasks each RL step takes: drawn afresh each step, or the `mixed` curriculum's
passes, which walk again only the tasks whose groups had mixed outcomes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from engines.env.task_sources.micro import generate_micro_tasks
from engines.rollout.curriculum import StepTasks, group_outcomes


@pytest.fixture(scope="module")
def tasks():
    return generate_micro_tasks(12, seed=7)


def ids(step_tasks: StepTasks, *steps: int) -> list[str]:
    return [t.instance_id for step in steps for t in step_tasks(step)]


def test_step_tasks_depend_only_on_seed_and_step(tasks):
    a = ids(StepTasks(tasks, 4, seed=1), 3)
    assert a == ids(StepTasks(tasks, 4, seed=1), 3)  # a fresh walker: as after a restart
    assert a != ids(StepTasks(tasks, 4, seed=1), 4)
    assert a != ids(StepTasks(tasks, 4, seed=2), 3)


def test_a_step_draws_distinct_tasks_while_the_pool_is_large_enough(tasks):
    assert len(set(ids(StepTasks(tasks, 12, seed=0), 5))) == 12


def test_mixed_meets_every_task_once_before_any_twice(tasks):
    # nothing graded yet: every task stays in the walk; 12 tasks, 5 a step: 2 steps a pass, 2 wait
    walk = StepTasks(tasks, 5, seed=2, curriculum="mixed", outcomes=lambda step: {})
    first_pass, second_pass = ids(walk, 0, 1), ids(walk, 2, 3)
    assert len(set(first_pass)) == 10 and len(set(second_pass)) == 10
    assert first_pass != second_pass  # each pass walks a new order
    assert walk.passes() == [(0, 12), (2, 12)]


def test_a_pool_smaller_than_a_step_repeats_tasks(tasks):
    drawn = StepTasks(tasks[:3], 8, seed=0)(0)
    assert len(drawn) == 8 and {t.instance_id for t in drawn} <= {t.instance_id for t in tasks[:3]}


def outcomes_table(results: dict[str, list[bool | None]]) -> pa.Table:
    """A step's rollouts as the lake has them: None is an episode the harness failed."""
    rows = [(task, r) for task, rs in results.items() for r in rs]
    return pa.table(
        {
            "task_id": [task for task, _ in rows],
            "resolved": [bool(r) for _, r in rows],
            "infra_failure": [r is None for _, r in rows],
        }
    )


def test_group_outcomes_leave_harness_failures_out():
    table = outcomes_table({"a": [True, False, None], "b": [None, None], "c": [False, False]})
    assert group_outcomes(table) == {"a": (1, 2), "c": (0, 2)}


def test_mixed_walks_again_the_tasks_with_mixed_groups_and_a_quarter_set_aside_ones(tasks):
    mixed = {t.instance_id for t in tasks[:6]}

    def published(step: int) -> dict[str, tuple[int, int]]:
        # the first 6 tasks had mixed groups, the others failed whole
        return {t.instance_id: ((2, 4) if t.instance_id in mixed else (0, 4)) for t in first(step)}

    first = StepTasks(tasks, 3, seed=4, curriculum="mixed", outcomes=lambda step: {})  # its first pass
    curriculum = StepTasks(tasks, 3, seed=4, curriculum="mixed", outcomes=published)
    assert ids(curriculum, 0, 1, 2, 3) == ids(first, 0, 1, 2, 3)
    second = ids(curriculum, 4, 5, 6)  # 6 mixed tasks and 3 set aside: 3 steps
    assert len(set(second)) == 9 and mixed <= set(second)
    # the set-aside ones tried again are those walked longest ago
    walked_at = {task: step for step in range(4) for task in ids(first, step)}
    again, left = set(second) - mixed, set(walked_at) - set(second)
    assert max(walked_at[t] for t in again) <= min(walked_at[t] for t in left)
    assert curriculum.passes() == [(0, 12), (4, 9)]


def test_mixed_tries_the_stalest_set_aside_tasks_when_none_are_mixed(tasks):
    def published(step: int) -> dict[str, tuple[int, int]]:
        return {t.instance_id: (4, 4) for t in tasks}  # every group passed whole

    first = StepTasks(tasks, 3, seed=4, curriculum="mixed", outcomes=lambda step: {})
    curriculum = StepTasks(tasks, 3, seed=4, curriculum="mixed", outcomes=published)
    # one step a pass, each the tasks walked longest ago: the first pass's in its order
    assert [set(ids(curriculum, step)) for step in (4, 5, 6, 7, 8)] == [
        set(ids(first, step)) for step in (0, 1, 2, 3, 0)
    ]
    assert curriculum.passes()[:3] == [(0, 12), (4, 3), (5, 3)]


def test_mixed_needs_the_published_outcomes(tasks):
    with pytest.raises(ValueError, match="rl.curriculum"):
        StepTasks(tasks, 3, seed=0, curriculum="mixed")
