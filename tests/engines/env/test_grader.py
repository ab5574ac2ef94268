"""Grading micro tasks through the real sandbox: gold, empty, bad input; the pool keeps serving."""

from dataclasses import replace

import pytest

from engines.env.grader import GradingPool, grade
from engines.env.types import Task
from engines.env.workspace import base_files, unified_diff

pytestmark = [pytest.mark.sandbox]


def test_gold_resolves_and_empty_does_not(micro_tasks, env_config):
    with GradingPool(env_config) as pool:
        gold = pool.grade_many([(t, t.patch) for t in micro_tasks])
        empty = pool.grade_many([(t, "") for t in micro_tasks])
    for task, g, e in zip(micro_tasks, gold, empty):
        assert g.resolved and g.reward == 1.0 and not g.infra_failure, (task.instance_id, g)
        assert g.f2p_passed == g.f2p_total == len(task.FAIL_TO_PASS)
        assert not e.resolved and e.reward == 0.0 and not e.infra_failure
        assert e.f2p_passed == 0 and e.p2p_passed == e.p2p_total
        assert all(e.report[t] == "FAILED" for t in task.FAIL_TO_PASS)


def test_partial_credit_is_opt_in(micro_tasks, env_config):
    task = next(t for t in micro_tasks if len(t.FAIL_TO_PASS) >= 2)
    # A patch that fixes nothing but keeps the module importable: reward 0 either way.
    assert grade(task, "", env_config.model_copy(update={"partial_credit": True})).reward == 0.0
    assert grade(task, task.patch, env_config.model_copy(update={"partial_credit": True})).reward == 1.0


def _edit(task: Task, new_module: str) -> str:
    base = base_files(task)
    return unified_diff(base, base | {"m.py": new_module.encode()})


def test_bad_patches_are_graded_failures_and_the_pool_keeps_serving(micro_tasks, env_config):
    task = micro_tasks[0]
    not_applying = (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-nothing like this\n+x\n context\n"
    )
    huge = _edit(task, base_files(task)["m.py"].decode() + "#" * (50 * 2**20) + "\n")
    cases = [not_applying, "\0\x7fELF binary junk \xff", huge, "just words, no diff", 12345]
    with GradingPool(env_config) as pool:
        results = pool.grade_many([(task, p) for p in cases] + [(task, task.patch)])
    for result in results[:-1]:
        assert not result.resolved and result.reward == 0.0 and not result.infra_failure
        assert result.notes and not result.patch_applied
    assert "max_patch_bytes" in results[2].notes
    assert results[-1].resolved  # still serving


def test_broken_task_is_an_infra_failure_naming_it(micro_tasks, env_config):
    task = replace(micro_tasks[1], snapshot_uri="/nonexistent/snapshot", instance_id="broken-task-1")
    with GradingPool(env_config) as pool:
        bad, good = pool.grade_many([(task, task.patch), (micro_tasks[1], micro_tasks[1].patch)])
    assert bad.infra_failure and "broken-task-1" in bad.infra_message and not bad.resolved
    assert good.resolved


def test_task_with_missing_fields_is_refused_with_its_name(micro_tasks):
    row = micro_tasks[0].to_row()
    del row["test_cmd"]
    with pytest.raises(ValueError, match=micro_tasks[0].instance_id):
        Task.from_row(row)


def test_grading_one_micro_task_is_cheap(micro_tasks, env_config):
    # Not a speed assertion (those live in benchmarks/): a sanity bound far above the target.
    task = micro_tasks[2]
    grade(task, task.patch, env_config)  # warm the parser import
    result = grade(task, task.patch, env_config)
    assert result.resolved and result.grading_s < 5


def test_a_flagged_patch_gets_no_reward_by_default_and_is_only_recorded_on_request(micro_tasks, env_config):
    """The patch monitor (engines/env/monitor.py) on a grade: an always-equal object passes
    every test, so only the monitor's flag stands between it and the reward."""
    task = micro_tasks[3]
    source = base_files(task)["m.py"].decode()
    names = [line[4 : line.index("(")] for line in source.splitlines() if line.startswith("def ")]
    hack = source + "\nclass _Any:\n    def __eq__(self, other):\n        return True\n"
    hack += "".join(f"\ndef {n}(a, b):\n    return _Any()\n" for n in names)
    patch = _edit(task, hack)
    with GradingPool(env_config) as pool:
        default, gold = pool.grade_many([(task, patch), (task, task.patch)])
        fast = pool.grade_one(task, patch, fast=True, changes={"m.py": hack.encode()})
    with GradingPool(env_config.model_copy(update={"hack_policy": "record", "strict_judge": False})) as pool:
        recorded = pool.grade_one(task, patch)  # the strict judge would reject it on its own (test_judge.py)
    assert not default.resolved and default.reward == 0.0 and default.flags == ("equality_dunder",)
    assert "equality_dunder" in default.notes and "zero_reward" in default.notes
    assert all(s == "PASSED" for s in default.report.values())  # what the tests said is kept
    assert not fast.resolved and fast.flags == ("equality_dunder",)  # the test tool's route too
    assert recorded.resolved and recorded.reward == 1.0 and recorded.flags == ("equality_dunder",)
    assert gold.resolved and gold.flags == () and gold.notes == ""
