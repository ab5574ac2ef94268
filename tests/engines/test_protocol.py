"""The action language: every action renders to text that parses back to it, and text
that does not fit a tool's usage is an InvalidAction that says how to write it."""

from __future__ import annotations

import pytest

from engines.protocol import Action, InvalidAction, parse_action, render_action

ACTIONS = [
    Action("view", path="m.py"),
    Action("view", path="m.py", line=2, end_line=5),
    Action("view", path="m.py", scope="mix"),
    Action("edit", path="m.py", line=3, body="    return a - b"),
    Action("replace", path="m.py", old="a + b", new="a - b"),
    Action("change", path="m.py", line=3, old="+", new="-"),
    Action("change", path="m.py", scope="mix", old="a - b", new="b - a"),
    Action("change", path="m.py", scope="mix", old="if", new="if not"),
    Action("bash", body="ls"),
    Action("test"),
    Action("submit"),
]


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: render_action(a).replace("\n", "|"))
def test_every_action_round_trips_through_its_text(action: Action) -> None:
    assert parse_action(render_action(action)) == action


def test_a_change_names_its_scope_by_line_number_or_function_name() -> None:
    assert parse_action("change m.py 12\n<\n<=") == Action("change", path="m.py", line=12, old="<", new="<=")
    assert parse_action("change m.py tally\n3\n4") == Action("change", path="m.py", scope="tally", old="3", new="4")


@pytest.mark.parametrize(
    "text",
    [
        "change m.py\n+\n-",  # no scope
        "change m.py f g\n+\n-",  # two scopes
        "change m.py 0\n+\n-",  # no line 0
        "change m.py f\n+",  # no NEW line
        "change m.py f\n+\n-\n*",  # three lines
        "change m.py f\n\n-",  # empty OLD
    ],
)
def test_a_malformed_change_is_refused_with_its_usage(text: str) -> None:
    action = parse_action(text)
    assert isinstance(action, InvalidAction)
    assert action.message.startswith("usage: change PATH LINE_OR_FUNCTION")
