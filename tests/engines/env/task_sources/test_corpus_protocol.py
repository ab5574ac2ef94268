"""The protocol on real-shaped tasks: multi-edit fixes under kept feedback, hidden tests
that stay hidden in-session and decide the grade, `Class.method` scopes, paged views,
undo, and the hint a run's statements carry. Sessions run their tests in the bubblewrap
sandbox and the grades are the real grader's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engines.env.config import EnvConfig
from engines.env.grader import grade
from engines.env.session import EnvSession
from engines.env.task_sources.selection import select_tasks, with_hint
from engines.env.types import Task
from tests.real_project import (
    ADD_BUG,
    HIDDEN_FILE,
    PRICE_BUG,
    SOURCE,
    TOTAL_BUG,
    hidden_test_task,
    two_edit_task,
    write_project,
)

pytestmark = [pytest.mark.corpus, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("shop"))


def _config(env_config: EnvConfig, **update: object) -> EnvConfig:
    return env_config.model_copy(update={"limits": env_config.limits.model_copy(update={"wall_timeout_s": 30.0})})


def _fix(old_new: tuple[str, str]) -> str:
    """A `replace` that undoes one mutation (NEW back to OLD)."""
    return f"replace {SOURCE}\n{old_new[1]}\n=====\n{old_new[0]}"


def test_a_fix_that_needs_two_edits_is_assembled_under_kept_feedback(project, env_config) -> None:
    task = two_edit_task(project)
    keep = _config(env_config).model_copy(update={"edit_attempts": 3, "feedback": "keep"})
    with EnvSession.open(task, keep) as s:
        first = s.step(_fix(ADD_BUG))
        assert not first.done and "1 failed" in first.observation
        assert first.observation.endswith("kept (attempt 1 of 3); undo reverts it")
        second = s.step(_fix(TOTAL_BUG))
        assert second.done and second.observation.startswith("4 passed, 0 failed")
        patch = s.patch()
    assert grade(task, patch, keep).resolved


def test_rolled_back_feedback_can_never_assemble_it(project, env_config) -> None:
    task = two_edit_task(project)
    rollback = _config(env_config).model_copy(update={"edit_attempts": 3, "feedback": "rollback"})
    with EnvSession.open(task, rollback) as s:
        assert s.step(_fix(ADD_BUG)).observation.endswith("reverted (attempt 1 of 3)")
        assert s.step(_fix(TOTAL_BUG)).observation.endswith("reverted (attempt 2 of 3)")
        patch = s.patch()
    assert patch == "" and not grade(task, patch, rollback).resolved


def test_hidden_tests_stay_hidden_in_session_and_decide_the_grade(project, env_config) -> None:
    task = hidden_test_task(project)
    keep = _config(env_config).model_copy(update={"edit_attempts": 2, "feedback": "keep"})
    with EnvSession.open(task, keep) as s:
        visible = s.step("test").observation
        assert visible.startswith("4 passed, 0 failed") and "unpriced" not in visible
        assert "no file" in s.step(f"view {HIDDEN_FILE}").observation
        listing = s.step("bash\nls tests; grep -rl unpriced . || echo none").observation
        assert "test_unpriced" not in listing and "none" in listing
        assert not grade(task, s.patch(), keep).resolved  # the hidden test fails on the base
        fixed = s.step(_fix(PRICE_BUG))
        # The visible tests pass, but they are not what grades: kept, and the agent must submit.
        assert not fixed.done and "hidden tests grade the fix: submit" in fixed.observation
        patch = s.patch()
    assert grade(task, patch, keep).resolved


def test_a_class_method_scope_applies_and_an_ambiguous_name_lists_candidates(project, env_config) -> None:
    task = two_edit_task(project)
    with EnvSession.open(task, _config(env_config)) as s:
        ambiguous = s.step(f"view {SOURCE} get").observation
        assert "2 functions named 'get': Stock.get (line 12), Prices.get (line 23)" in ambiguous
        both_inits = s.step(f"change {SOURCE} __init__\nself\nthis").observation
        assert "Stock.__init__ (line 5), Prices.__init__ (line 17)" in both_inits
        shown = s.step(f"view {SOURCE} Prices.get").observation
        assert shown == "23     def get(self, name):\n24         return self.table.get(name, 0)"
        edited = s.step(f"change {SOURCE} Prices.get\n 0)\n 7)").observation
        assert edited == f"edited {SOURCE}\n24         return self.table.get(name, 7)"
        assert "return self.items.get(name, 0)" in s.step(f"view {SOURCE} Stock.get").observation  # untouched
        assert s.step(f"view {SOURCE} Prices").observation.startswith("16 class Prices:")


def test_views_page_long_files_and_functions_and_say_where_the_rest_is(project, env_config) -> None:
    task = two_edit_task(project)
    with EnvSession.open(task, _config(env_config).model_copy(update={"view_lines": 8})) as s:
        page = s.step(f"view {SOURCE}").observation.split("\n")
        assert len(page) == 9 and page[-1] == f"[showing lines 1-8 of 27 lines; view {SOURCE} 9-16 shows more]"
        assert s.step(f"view {SOURCE} 9-16").observation.split("\n")[0].startswith("9 ")
        whole = s.step(f"view {SOURCE} Prices").observation.split("\n")
        assert whole[-1] == f"[showing lines 16-23 of Prices, lines 16-27; view {SOURCE} 24-27 shows more]"
        assert "usage: view" in s.step(f"view {SOURCE} 9-x").observation


def test_undo_reverts_the_last_edit_still_in_place(project, env_config) -> None:
    task = two_edit_task(project)
    with EnvSession.open(task, _config(env_config)) as s:
        assert s.step("undo").observation == "error: no edit to undo"
        s.step(_fix(ADD_BUG))
        s.step(_fix(TOTAL_BUG))
        assert s.step("undo").observation == f"undone: {SOURCE} is as it was before your last edit"
        patch = s.patch()
        assert "+        self.items[name] = self.items.get(name, 0) + count" in patch and "stock.get(n)" not in patch
        s.step("undo")
        assert s.patch() == ""


def test_hints_state_the_file_and_the_function_from_the_tasks_metadata(project) -> None:
    task = two_edit_task(project)
    assert with_hint(task, "tests") == task
    assert with_hint(task, "file").problem_statement.endswith(f"\nThe bug is in {SOURCE}.")
    assert with_hint(task, "function").problem_statement.endswith(f"\nThe bug is in Stock.add of {SOURCE}.")
    bare = replace(task, metadata=json.dumps({"file": SOURCE}))  # an import knows no function
    assert with_hint(bare, "function").problem_statement.endswith(f"\nThe bug is in {SOURCE}.")


def test_a_run_draws_at_most_its_share_of_each_split_by_seed(project) -> None:
    base = two_edit_task(project)
    tasks = [
        replace(base, instance_id=f"t{i}", split="heldout" if i % 4 == 0 else "train") for i in range(40)
    ]  # 30 train, 10 held out
    drawn = select_tasks(tasks, train=12, heldout=20, seed=3)
    assert sum(t.split == "train" for t in drawn) == 12 and sum(t.split == "heldout" for t in drawn) == 10
    assert drawn == select_tasks(tasks, 12, 20, 3) and drawn != select_tasks(tasks, 12, 20, 4)
    assert [t.instance_id for t in drawn] == sorted((t.instance_id for t in drawn), key=lambda i: int(i[1:]))


def test_the_built_shapes_are_what_the_grader_agrees_with(project, env_config) -> None:
    """The test project's tasks are valid tasks: the gold patch resolves them, the empty patch does not."""
    config = _config(env_config)
    for task in (two_edit_task(project), hidden_test_task(project)):
        assert isinstance(task, Task)
        assert grade(task, task.patch, config).resolved, task.instance_id
        assert not grade(task, "", config).resolved, task.instance_id
