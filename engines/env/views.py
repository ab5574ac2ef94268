"""What the model sees of a file: numbered lines, pages of them, one function's lines.

The format of the task's prompt, of the `view` tool's observations and of the
demonstrations that copy them, so a model reads one format everywhere.
"""

from __future__ import annotations

from engines.env.edits import function_lines


def numbered(text: str, start: int = 1) -> str:
    """`N code` lines: the format of the prompt and of the `view` tool."""
    return "\n".join(f"{i} {line}" for i, line in enumerate(text.splitlines(), start))


def page(path: str, lines: list[str], first: int, last: int, page_lines: int, what: str = "") -> str:
    """Numbered lines `first`..`last` (1-based) of `lines`, at most `page_lines` of them; a cut
    is stated with the range to view next. `what` names the span (a function) in that note."""
    end = min(last, first + page_lines - 1)
    shown = numbered("\n".join(lines[first - 1 : end]), first)
    if end >= last:
        return shown
    span = f"{what}, lines {first}-{last}" if what else f"{len(lines)} lines"
    return f"{shown}\n[showing lines {first}-{end} of {span}; view {path} {end + 1}-{min(last, end + page_lines)} shows more]"


def function_view(path: str, lines: list[str], name: str, page_lines: int = 60) -> str:
    """What `view PATH NAME` shows: the numbered lines of the one function or class `name`
    (`Class.method`), its first page when it is longer than `page_lines`."""
    span = function_lines(lines, name)
    if isinstance(span, str):
        return f"error: {path}: {span}"
    return page(path, lines, span[0], span[1], page_lines, what=name)
