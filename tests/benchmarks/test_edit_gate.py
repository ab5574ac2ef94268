"""The edit gate's classification of a first edit (benchmarks/edit_gate.py), checked on
hand-written edits of one generated task, and its in-process episodes on a real (if
barely trained) tiny model."""

from __future__ import annotations

import pytest

from benchmarks.edit_gate import classify, figures, run_episodes, token_distance, wilson
from engines.env.task_sources.edit_forms import oracle_action
from engines.env.task_sources.micro import MODULE, generate_micro_tasks, named_function
from engines.protocol import Action
from flows.config import RunConfig


@pytest.fixture(scope="module")
def task():
    # a task whose named function has a `-` or `+` to flip, on a line that is not the bug
    for t in generate_micro_tasks(50, seed=2):
        meta = t.meta()
        lines = meta["files"][MODULE].rstrip("\n").split("\n")
        first = next(i for i, line in enumerate(lines, 1) if line == f"def {named_function(t)}(a, b):")
        body = range(first + 1, first + 5)
        other = [n for n in body if n <= len(lines) and n != meta["line"] and " - " in lines[n - 1]]
        if other and not lines[other[0] - 1].startswith("def "):
            return t, lines, other[0]
    raise AssertionError("no suitable task")


def test_the_oracle_fix_is_valid_inside_the_function_on_the_buggy_line_and_passes(task) -> None:
    t, _, _ = task
    for form in ("edit", "function_change", "line_change"):
        got = classify(t, oracle_action(t, form))
        assert all(got.values()), (form, got)


def test_a_one_token_edit_of_another_line_is_valid_but_not_the_buggy_line(task) -> None:
    t, lines, other = task
    got = classify(t, Action("edit", path=MODULE, line=other, body=lines[other - 1].replace(" - ", " + ", 1)))
    assert got["valid_single_token"] and got["inside_function"] and got["gate"]
    assert not got["buggy_line"] and not got["first_edit_passes"]


def test_broken_indentation_several_tokens_or_no_edit_are_not_valid(task) -> None:
    t, lines, other = task
    dedented = classify(t, Action("edit", path=MODULE, line=other, body=lines[other - 1].strip().replace(" - ", " + ")))
    assert dedented["applied"] and not dedented["valid_single_token"]
    two_tokens = lines[other - 1].replace(" - ", " * 7 + ", 1)
    assert not classify(t, Action("edit", path=MODULE, line=other, body=two_tokens))["valid_single_token"]
    refused = classify(t, Action("change", path=MODULE, scope=named_function(t), old="no such text", new="x"))
    assert refused["first_turn_edit"] and not refused["applied"] and not refused["gate"]
    assert not any(classify(t, None).values())


def test_token_distance_and_wilson_interval() -> None:
    assert token_distance(["a", "-", "b"], ["a", "+", "b"]) == 1
    assert token_distance(["a", "b"], ["-", "a", "b"]) == 1
    assert token_distance(["a", "-", "b"], ["b", "-", "a"]) == 2
    low, high = wilson(80, 100)
    assert low < 0.8 < high and high - low < 0.17


@pytest.mark.slow
def test_episodes_run_in_process_through_the_session(tiny_model_dir, tmp_path) -> None:
    """Greedy episodes on a real tiny model: every task gets a classified first turn and
    at most env.edit_attempts tested attempts."""
    tasks = generate_micro_tasks(6, seed=4, split="heldout")
    results = run_episodes(tiny_model_dir, tasks, RunConfig(), tmp_path)
    assert len(results) == len(tasks)
    assert all(r["first"] is not None and r["attempts"] <= 3 for r in results)
    out = figures(results)
    assert out["tasks"] == 6 and 0 <= out["gate"] <= 1 and "gate_interval" in out
