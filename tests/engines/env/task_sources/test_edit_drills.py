"""Edit drills: the hint names what the drill views and changes, the view is the session's
own, the change applies inside that function and rewrites one line, and the installed
code gives each drill its own file."""

from __future__ import annotations

import random
from collections import Counter

from engines.env.edits import Edited, apply_edit, line_tokens
from engines.env.scopes import resolve
from engines.env.task_sources.edit_drills import edit_drill, edit_drills
from engines.env.views import function_view
from engines.protocol import parse_action

SOURCE = '''"""A module."""


class Window:
    def __init__(self, size):
        self.size = size

    def fits(self, n):
        return n <= self.size and n > 0


def scaled(values, k):
    out = []
    for v in values:
        out.append(v * k + 1)
    return out
'''


def check(drill: list[dict[str, str]], path: str, text: str, hint_only: bool = False) -> None:
    """The drill's turns hold together on the file `path` whose text is `text`."""
    assert [m["role"] for m in drill] == ["user", "assistant", "tool", "assistant"]
    statement, view, shown, change = (m["content"] for m in drill)
    if hint_only:
        assert statement.startswith("The bug is in ") and "\n" not in statement
    else:
        assert statement.startswith("Some tests of ") and "\nFailing tests:\nFAILED tests/" in statement
    scope, hinted = statement.splitlines()[-1].removeprefix("The bug is in ").removesuffix(".").split(" of ")
    assert hinted == path
    action = parse_action(view)
    assert (action.tool, action.path, action.scope) == ("view", path, scope)
    lines = text.rstrip("\n").split("\n")
    assert shown == function_view(path, lines, scope)  # what the session shows for that view
    edit = parse_action(change)
    assert edit.tool == "change" and edit.path == path
    edited = apply_edit(path, lines, edit)
    assert isinstance(edited, Edited), edited
    changed = [i for i, (a, b) in enumerate(zip(lines, edited.lines), 1) if a != b]
    span = resolve(lines, scope)
    assert len(changed) == 1 and span.first <= changed[0] <= span.last  # one line of the hinted function


def test_a_drill_views_the_hinted_function_and_changes_one_of_its_lines() -> None:
    seen = set()
    for seed in range(30):
        drill = edit_drill("shapes/window.py", SOURCE, random.Random(seed))
        check(drill, "shapes/window.py", SOURCE)
        assert drill[0]["content"].startswith("Some tests of shapes ")
        seen.add(drill[1]["content"])
    assert seen == {"view shapes/window.py Window.fits", "view shapes/window.py scaled"}
    assert edit_drill("empty.py", "X = 1\n", random.Random(0)) is None  # no function to change


def test_a_hint_drill_states_the_hint_line_alone_and_holds_together() -> None:
    for seed in range(30):
        check(
            edit_drill("shapes/window.py", SOURCE, random.Random(seed), statement="hint"),
            "shapes/window.py",
            SOURCE,
            True,
        )
    hinted = edit_drills(20, seed=3, statement="hint")
    assert len(hinted) == 20 and all("\n" not in d[0]["content"] for d in hinted)
    assert all(
        d[0]["content"] == f"The bug is in {d[1]['content'].split()[2]} of {d[1]['content'].split()[1]}."
        for d in hinted
    )


def test_the_installed_code_gives_each_drill_its_own_file() -> None:
    drills = edit_drills(100, seed=0)
    assert len(drills) == 100
    paths = Counter(parse_action(d[1]["content"]).path for d in drills)
    assert len(paths) == 100  # one drill a file: too many functions to recall
    assert all(path.endswith(".py") and not path.startswith("/") for path in paths)
    assert edit_drills(5, seed=0) == drills[:5] and edit_drills(5, seed=1) != drills[:5]


def test_old_tokens_makes_each_drills_old_a_wider_piece_of_the_same_line() -> None:
    for seed in range(30):
        narrow = edit_drill("shapes/window.py", SOURCE, random.Random(seed))
        wide = edit_drill("shapes/window.py", SOURCE, random.Random(seed), old_tokens=5)
        check(wide, "shapes/window.py", SOURCE)
        a, b = parse_action(narrow[3]["content"]), parse_action(wide[3]["content"])
        line = next(x for x in SOURCE.splitlines() if b.old in x)
        at = line.index(b.old)
        inside = [t for t in line_tokens(line) if at <= t[1] and t[2] <= at + len(b.old)]
        assert a.old.strip() in b.old and len(inside) >= min(5, len(line_tokens(line)))
        assert apply_edit("w.py", SOURCE.splitlines(), a).lines == apply_edit("w.py", SOURCE.splitlines(), b).lines
