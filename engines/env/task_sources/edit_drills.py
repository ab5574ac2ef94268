"""Edit drills: a repository episode's first turns on a function of the installed Python
code: view the function the hint names, then change one of its lines.

The repository demonstrations teach the tools on a few projects' functions, and a tiny
model learns those functions' names and lines by heart: on a project it never saw, its
first view named no right file (docs/2026-12-06-real-task-gate.md). The copy drills
teach copying the hinted names (copy_drills.py); an edit also copies OLD from the
view. These drills ask for both on code too plentiful to recall (the standard library
and site-packages beside the trainer, about 30,000 files): the statement is shaped like
the builder's (copy_drills.py: drill_statement), the hint names a real function of a
real module path (`json/decoder.py`), the view is the session's own
(engines/env/views.py), and the change rewrites one line by one of the builder's
mutation kinds in the form the demonstrations write (repo_demos.py: change_action). No
test runs: like the demonstrations, they teach the form of an edit, not the fix.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from engines.env.scopes import definitions, holding
from engines.env.task_sources.copy_drills import drill_statement, installed_files, installed_pool
from engines.env.task_sources.mutations import mutations
from engines.env.task_sources.repo_demos import change_action, changed_line
from engines.env.task_sources.selection import hint_sentence
from engines.env.views import function_view
from engines.protocol import Action, render_action

# Files past this size parse slowly and hold few functions a drill would pick first.
_MAX_BYTES = 60_000


def edit_drill(
    path: str,
    text: str,
    rng: random.Random,
    view_lines: int = 60,
    old_tokens: int = 2,
    statement: Literal["full", "hint"] = "full",
) -> list[dict[str, str]] | None:
    """A drill on `text` (the file `path`): the statement (shaped like the builder's, or
    its hint line alone), `view` of the function holding a random mutation's line, the
    view, and the `change` of that line (OLD at least `old_tokens` whole tokens); None
    when the file has no mutation on the function's first page."""
    lines = text.rstrip("\n").split("\n")
    found = mutations(text)
    if not found:
        return None
    defs = definitions("\n".join(lines))  # parses: `mutations` found some
    rng.shuffle(found)
    for mutation in found[:8]:
        changed = changed_line(lines, mutation.apply(text).rstrip("\n").split("\n"))
        scope = holding(defs, mutation.line)
        if changed is None or scope is None or changed[0] >= scope.first + view_lines:
            continue
        function = scope.qualname
        package, module = path.split("/")[0].removesuffix(".py"), Path(path).stem
        stated = hint_sentence(path, function)
        if statement == "full":
            stated = drill_statement(installed_pool(), rng, package, module, function.split(".")[-1], stated)
        return [
            {"role": "user", "content": stated},
            {"role": "assistant", "content": render_action(Action("view", path=path, scope=function))},
            {"role": "tool", "content": function_view(path, lines, function, view_lines)},
            {"role": "assistant", "content": render_action(change_action(path, lines, scope, *changed, old_tokens))},
        ]
    return None


def edit_drills(
    count: int,
    seed: int,
    view_lines: int = 60,
    old_tokens: int = 2,
    statement: Literal["full", "hint"] = "full",
) -> list[list[dict[str, str]]]:
    """`count` drills on installed files drawn by `seed`, one per file while files last,
    each OLD at least `old_tokens` whole tokens, each statement `statement` (edit_drill)."""
    files = [(rel, where) for rel, where in installed_files() if where.stat().st_size <= _MAX_BYTES]
    rng = random.Random(seed)
    drills: list[list[dict[str, str]]] = []
    while len(drills) < count and files:
        rng.shuffle(files)
        for rel, where in files:
            text = where.read_text(encoding="utf-8", errors="ignore")
            drill = edit_drill(rel, text, rng, view_lines, old_tokens, statement)
            if drill is not None:
                drills.append(drill)
            if len(drills) == count:
                break
    return drills
