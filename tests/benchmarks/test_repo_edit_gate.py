"""The real-task edit gate's classification of a first edit (benchmarks/repo_edit_gate.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.repo_edit_gate import classify, figures, old_figures
from engines.protocol import Action, parse_action, render_action
from tests.real_project import INVENTORY, SOURCE, TOTAL_OPERATOR_BUG, one_bug_task, write_project


def _first(task, action: Action | None, viewed: list[str] | None = None, seen: str = "") -> dict[str, bool]:
    lines = INVENTORY.replace(*TOTAL_OPERATOR_BUG).rstrip("\n").split("\n")
    parsed = None if action is None else parse_action(render_action(action))
    return classify(task, {SOURCE: lines}, viewed or [], parsed, parsed, seen)


def test_an_edit_counts_for_the_gate_only_inside_the_function_the_statement_names(tmp_path: Path) -> None:
    task = one_bug_task(write_project(tmp_path / "shop"))  # the bug is in Prices.total
    seen = INVENTORY.replace(*TOTAL_OPERATOR_BUG)  # the view the episode showed
    fix = _first(task, Action("change", SOURCE, scope="Prices.total", old=" //", new=" *"), ["total"], seen)
    # The task's meta names no line; the first action naming the file was this edit, not a view.
    misses = {"old_repeated": False, "old_spacing": False, "old_half_copied": False}
    assert fix == dict.fromkeys(fix, True) | {"buggy_line": False, "first_view": False} | misses
    elsewhere = _first(task, Action("change", SOURCE, scope="Stock.add", old=" +", new=" -"), viewed=["Stock.add"])
    assert elsewhere["applied"] and not elsewhere["gate"] and not elsewhere["scope_named"]
    assert not elsewhere["named_view"]
    guessed = _first(task, Action("change", SOURCE, scope="Prices.total", old=" %", new=" *"), seen=seen)
    assert guessed["first_edit"] and guessed["scope_named"] and not guessed["old_in_function"]
    assert not guessed["old_in_view"] and not guessed["old_half_copied"]
    assert not guessed["applied"] and not guessed["gate"]
    none = _first(task, None)
    assert not any(none.values())
    other_file = classify(task, {SOURCE: []}, [], None, Action("view", "shop/other.py", scope="Prices.total"))
    assert not other_file["named_file"] and not other_file["first_view"]
    for scope, exact in (("Prices.total", True), ("total", False), ("Stock.add", False)):
        view = classify(task, {SOURCE: []}, [], None, Action("view", SOURCE, scope=scope))
        assert view["named_file"] and view["first_view"] == exact  # exactly the hint's names
    shares = figures([{"first": fix, "actions": {"change": 1}}, {"first": none, "actions": {"view": 10}}])
    assert shares["gate"] == 0.5 and shares["turns"] == {"view": 10, "change": 1}


def test_an_old_that_misses_says_how_it_missed() -> None:
    function = "def f(a, b):\n    if a > b:\n        return a - b\n    return b - a"
    assert old_figures(" - b", function) == {
        "old_in_function": True,
        "old_repeated": False,
        "old_spacing": False,
        "old_half_copied": False,
    }
    assert old_figures(" b - a", function)["old_in_function"]
    assert old_figures("return", function)["old_repeated"]
    assert old_figures("     if a > b", function)["old_spacing"]  # one space too many before it
    broken = old_figures("return a - c", function)
    assert broken["old_half_copied"] and not broken["old_spacing"] and not broken["old_in_function"]
    assert old_figures("yield x", function) == dict.fromkeys(broken, False)
