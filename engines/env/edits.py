"""How an edit action changes a file's lines: the one place `edit`, `replace` and
`change` are applied.

The session (engines/env/session.py) applies the model's edits with `apply_edit`; the
edit-gate probe (benchmarks/edit_gate.py) applies the same function to classify an
edit without a workspace. A refused edit is an `EditError` whose message becomes the
observation (the file is left as it was).

`change PATH SCOPE` replaces OLD by NEW where OLD occurs exactly once inside SCOPE:
line SCOPE when it is a number, else the lines of the function or class named SCOPE
(qualified as `Class.method` where the name repeats: engines/env/scopes.py). OLD is
matched as plain text (like str_replace), within the scope only, so a short OLD (often
the one token that changes) is enough and the model never copies a whole line.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass

from engines.env.scopes import resolve
from engines.protocol import Action


@dataclass(frozen=True)
class EditError:
    message: str  # shown to the model, prefixed by "error: "


@dataclass(frozen=True)
class Edited:
    lines: list[str]  # the file's lines after the edit
    first: int  # 1-based first line the edit touched
    new: list[str]  # the lines written from `first` on (what an echo shows)


def apply_edit(path: str, lines: list[str], action: Action) -> Edited | EditError:
    """`lines` (without trailing newlines) after `action` (tool edit, replace or change)."""
    if action.tool == "edit":
        return _edit(path, lines, action)
    if action.tool == "replace":
        return _replace(path, lines, action)
    if action.tool == "change":
        return _change(path, lines, action)
    raise ValueError(f"apply_edit: {action.tool!r} is not an edit tool")


def _edit(path: str, lines: list[str], action: Action) -> Edited | EditError:
    if action.line > len(lines):
        return EditError(f"{path} has {len(lines)} lines; edit a line between 1 and {len(lines)}")
    new = action.body.split("\n") if action.body else []
    return Edited([*lines[: action.line - 1], *new, *lines[action.line :]], action.line, new)


def _replace(path: str, lines: list[str], action: Action) -> Edited | EditError:
    text = "\n".join(lines)
    count = text.count(action.old) if action.old else 0
    if count != 1:
        return EditError(f"the old text occurs {count} times in {path}; give text that occurs exactly once")
    at = text.index(action.old)
    first = text.count("\n", 0, at) + 1
    out = text.replace(action.old, action.new, 1).split("\n")
    return Edited(out, first, out[first - 1 : first + action.new.count("\n")])


def function_lines(lines: list[str], name: str) -> tuple[int, int] | str:
    """1-based (first, last) line of the one function or class `name` (`Class.method` where
    the name repeats) in `lines`, or why not (engines/env/scopes.py)."""
    found = resolve(lines, name)
    return found if isinstance(found, str) else (found.first, found.last)


def _change(path: str, lines: list[str], action: Action) -> Edited | EditError:
    if action.line is not None:
        if action.line > len(lines):
            return EditError(f"{path} has {len(lines)} lines; change a line between 1 and {len(lines)}")
        first, last, where = action.line, action.line, f"line {action.line}"
    else:
        span = function_lines(lines, action.scope)
        if isinstance(span, str):
            return EditError(f"{path}: {span}")
        (first, last), where = span, f"function {action.scope}"
    hits = [(i, line.count(action.old)) for i, line in enumerate(lines[first - 1 : last], first) if action.old]
    count = sum(n for _, n in hits)
    if count != 1:
        fix = "copy text from it" if count == 0 else "give a longer OLD"
        return EditError(f"OLD occurs {count} times in {where} of {path}; {fix}")
    at = next(i for i, n in hits if n)
    new = lines[at - 1].replace(action.old, action.new, 1)
    return Edited([*lines[: at - 1], new, *lines[at:]], at, [new])


def line_tokens(line: str) -> list[tuple[str, int, int]]:
    """(text, start column, end column) of each Python token of one source line; the
    indentation is no token. A line that does not tokenize is one token."""
    indent = len(line) - len(line.lstrip())
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line.lstrip()).readline))
    except (tokenize.TokenError, SyntaxError):
        return [(line.lstrip(), indent, len(line))] if line.strip() else []
    return [(t.string, indent + t.start[1], indent + t.end[1]) for t in toks if t.type not in skip]
