"""The shortest text an edit can name: the fewest whole tokens around a one-line change
that occur once in their scope (OLD), and what they become (NEW).

Shared by the micro demonstrations (engines/env/task_sources/micro.py: line_edit) and those of real
repositories (engines/env/task_sources/repo_demos.py), so both write `change PATH SCOPE` the same way.
"""

from __future__ import annotations

from engines.env.edits import line_tokens


def short_span(old_line: str, new_line: str, scope: list[str], min_width: int = 1) -> tuple[str, str] | None:
    """(OLD, NEW): the fewest whole tokens of `old_line` (at least `min_width`) around its
    change to `new_line` whose text occurs once in `scope` (the lines it must be unique
    in), and their new text; NEW is never empty. None when even the whole line is not
    unique."""
    a, b = line_tokens(old_line), line_tokens(new_line)
    if not a or not b:
        return None
    pre = 0
    while pre < min(len(a), len(b)) and a[pre][0] == b[pre][0]:
        pre += 1
    suf = 0
    while suf < min(len(a), len(b)) - pre and a[-1 - suf][0] == b[-1 - suf][0]:
        suf += 1
    text = "\n".join(scope)
    lo, hi = pre, len(a) - suf  # changed tokens of the old line: [lo, hi)
    for width in range(min(len(a), max(min_width, hi - lo)), len(a) + 1):
        for left in range(max(0, hi - width), min(lo, len(a) - width) + 1):
            right = left + width  # old tokens [left, right), covering [lo, hi)
            old = old_line[a[left][1] : a[right - 1][2]]
            new_right = right - len(a) + len(b)
            if new_right <= left:
                continue  # NEW would be empty
            new = new_line[b[left][1] : b[new_right - 1][2]]
            if text.count(old) == 1 and old_line.replace(old, new, 1) == new_line:
                return old, new
    return None


def with_leading_space(old_line: str, old: str, new: str) -> tuple[str, str]:
    """(OLD, NEW) widened by the space before OLD in `old_line`, if there is one. Still
    once in its scope: every occurrence of " OLD" holds one of OLD."""
    at = old_line.index(old)
    return (" " + old, " " + new) if at and old_line[at - 1] == " " else (old, new)
