"""apply_edit: the one place edit, replace and change change a file's lines; a refused
edit says why and leaves the lines as they were."""

from __future__ import annotations

from engines.env.edits import Edited, EditError, apply_edit, function_lines, line_tokens
from engines.protocol import Action

LINES = ["def f(a, b):", "    c = a + b", "    return c - a", "def g(a, b):", "    return a - b"]


def test_a_line_change_replaces_the_one_occurrence_on_that_line() -> None:
    edited = apply_edit("m.py", LINES, Action("change", path="m.py", line=3, old="-", new="+"))
    assert edited == Edited([*LINES[:2], "    return c + a", *LINES[3:]], 3, ["    return c + a"])


def test_a_function_change_looks_only_inside_the_named_function() -> None:
    # `-` occurs in f and in g: inside g it occurs once, so the change is unambiguous.
    edited = apply_edit("m.py", LINES, Action("change", path="m.py", scope="g", old="-", new="+"))
    assert isinstance(edited, Edited) and edited.lines == [*LINES[:4], "    return a + b"] and edited.first == 5


def test_a_change_whose_old_text_is_missing_or_ambiguous_is_refused() -> None:
    missing = apply_edit("m.py", LINES, Action("change", path="m.py", scope="f", old="*", new="+"))
    assert missing == EditError("OLD occurs 0 times in function f of m.py; copy text from it")
    ambiguous = apply_edit("m.py", LINES, Action("change", path="m.py", scope="f", old="a", new="b"))
    assert isinstance(ambiguous, EditError) and "occurs 3 times in function f" in ambiguous.message
    assert "give a longer OLD" in ambiguous.message
    wrong_line = apply_edit("m.py", LINES, Action("change", path="m.py", line=2, old="-", new="+"))
    assert wrong_line == EditError("OLD occurs 0 times in line 2 of m.py; copy text from it")


def test_a_change_of_a_missing_function_or_line_names_what_exists() -> None:
    unknown = apply_edit("m.py", LINES, Action("change", path="m.py", scope="h", old="-", new="+"))
    assert unknown == EditError("m.py: no function named 'h'; functions: f, g")
    past_end = apply_edit("m.py", LINES, Action("change", path="m.py", line=9, old="-", new="+"))
    assert past_end == EditError("m.py has 5 lines; change a line between 1 and 5")
    assert function_lines(LINES, "f") == (1, 3)


def test_edit_and_replace_apply_as_before() -> None:
    edited = apply_edit("m.py", LINES, Action("edit", path="m.py", line=2, body="    c = a * b"))
    assert isinstance(edited, Edited) and edited.lines[1] == "    c = a * b" and edited.first == 2
    replaced = apply_edit("m.py", LINES, Action("replace", path="m.py", old="c - a", new="a - c"))
    assert isinstance(replaced, Edited) and replaced.lines[2] == "    return a - c" and replaced.first == 3
    twice = apply_edit("m.py", LINES, Action("replace", path="m.py", old="return", new="yield"))
    assert twice == EditError("the old text occurs 2 times in m.py; give text that occurs exactly once")


def test_line_tokens_are_python_tokens_with_their_columns() -> None:
    assert line_tokens("    if not a <= 3:") == [
        ("if", 4, 6),
        ("not", 7, 10),
        ("a", 11, 12),
        ("<=", 13, 15),
        ("3", 16, 17),
        (":", 17, 18),
    ]
