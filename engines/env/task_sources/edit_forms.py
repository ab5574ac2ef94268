"""The edit forms: the ways an action can write a one-line fix, and the oracle's fix in each.

`line_edit` turns "set line N of the module to TEXT" into an action of one form
(`EditTool`); the warm start's demonstrations and the edit-form experiments choose the
form (`trainer.sft.edit_tool`). `oracle_action` is a micro task's fix in a form.
"""

from __future__ import annotations

import ast
from typing import Literal

from engines.env.edit_spans import short_span, with_leading_space
from engines.env.parse import parse_module
from engines.env.task_sources.micro import MODULE
from engines.env.types import Task
from engines.protocol import Action

EditTool = Literal[
    "edit",
    "replace",
    "short_replace",
    "line_change",
    "function_change",
    "viewed_change",
    "spaced_change",
    "spaced_line_change",
    "spaced_context_change",
]
EDIT_FORMS: tuple[str, ...] = EditTool.__args__
# The forms whose episodes first view the named function (micro_demos.py: opening).
VIEWED_FORMS = ("viewed_change", "spaced_change", "spaced_line_change", "spaced_context_change")


def line_edit(source: str, line: int, text: str, tool: EditTool = "edit") -> Action:
    """The action that sets 1-based `line` of `source` to `text`, in one of the edit forms.

    `edit` names the line by number and writes it whole. `replace` names it by content:
    the old line is copied, with as many lines above it as make it occur once in the
    file. The short forms write only the part that changes, OLD being the fewest whole
    tokens around the change that occur once in their scope: the file
    (`short_replace`, a str_replace with a short old string), line `line`
    (`line_change`: `change m.py LINE`), or the function holding the line
    (`function_change`: `change m.py NAME`, no line number at all). `viewed_change` writes
    the edit as `function_change`; its episodes first view the named function
    (micro_demos.py), so OLD is copied from the observation just above it.
    `spaced_change` is `viewed_change` with OLD and NEW keeping the space before their
    first token: written on a line of its own, " + 5" is the same BPE tokens as in the
    view (" +", " 5") where "+ 5" is not ("+" is another token), so OLD is a copy of
    the view's tokens, not a translation of them. `spaced_line_change` views the function
    too, then names the line by the number the view shows beside it (`change m.py LINE`),
    OLD spaced and unique in that line only: a token that occurs twice in the function
    needs no wider span. `spaced_context_change` is `spaced_change` with OLD at least two
    tokens wide (the change and the token before it, or after it at a line's start): a
    lone token occurs twice in its function in 23% of tasks, two in 3%, so the width OLD
    needs is almost never a count over the whole function."""
    if tool == "edit":
        return Action("edit", path=MODULE, line=line, body=text)
    lines = source.rstrip("\n").split("\n")
    if tool == "replace":
        return _context_replace(source, lines, line, text)
    if tool in ("line_change", "spaced_line_change"):
        old, new = short_span(lines[line - 1], text, [lines[line - 1]])
        if tool == "spaced_line_change":
            old, new = with_leading_space(lines[line - 1], old, new)
        return Action("change", path=MODULE, line=line, old=old, new=new)
    if tool == "function_change" or tool in VIEWED_FORMS:
        name, (first, last) = _enclosing_function(lines, line)
        min_width = 2 if tool == "spaced_context_change" else 1
        span = short_span(lines[line - 1], text, lines[first - 1 : last], min_width)
        if span is not None and tool in ("spaced_change", "spaced_context_change"):
            span = with_leading_space(lines[line - 1], *span)
        if span is not None:
            return Action("change", path=MODULE, scope=name, old=span[0], new=span[1])
        return line_edit(source, line, text, "line_change")  # no span occurs once in the function
    span = short_span(lines[line - 1], text, lines)
    if span is None:
        return _context_replace(source, lines, line, text)
    return Action("replace", path=MODULE, old=span[0], new=span[1])


def _context_replace(source: str, lines: list[str], line: int, text: str) -> Action:
    for first in range(line - 1, -1, -1):
        old = "\n".join(lines[first:line])
        if source.count(old) == 1:
            return Action("replace", path=MODULE, old=old, new="\n".join([*lines[first : line - 1], text]))
    raise ValueError(f"line {line} of {MODULE} has no unique context above it")


def _enclosing_function(lines: list[str], line: int) -> tuple[str, tuple[int, int]]:
    """The name and (first, last) lines of the innermost function holding `line`."""
    best = None
    for node in ast.walk(parse_module("\n".join(lines))):
        inside = isinstance(node, ast.FunctionDef) and node.lineno <= line <= (node.end_lineno or node.lineno)
        if inside and (best is None or node.lineno > best.lineno):
            best = node
    if best is None:
        raise ValueError(f"line {line} of {MODULE} is in no function")
    return best.name, (best.lineno, best.end_lineno or best.lineno)


def oracle_action(task: Task, tool: EditTool = "edit") -> Action:
    meta = task.meta()
    return line_edit(meta["files"][meta["file"]], meta["line"], meta["fixed_line"], tool)
