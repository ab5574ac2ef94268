"""Which tasks of a built corpus a run uses, and what its problem statements say.

A corpus (`tandem tasks build`, a SWE-bench import) is built once; a run takes from it
at most `train` training and `heldout` held-out tasks, drawn by `seed` (the same draw
on every machine), and states each problem with the hint the run asks for:

    tests     the failing tests and their output only (SWE-bench's own setting: the
              agent must find the bug from the tests)
    file      also the file the bug is in
    function  also the function or class (qualified, `Class.method`) it is in

The hint comes from the task's metadata (`file`, `function`: written by the builder,
which knows the mutant it made). A task that lacks what the hint needs (an imported
SWE-bench task has no `function`) is stated with what it has, and the statement says
no more than that.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from engines.env.types import Task

Hint = Literal["tests", "file", "function"]


def hint_line(task: Task, hint: Hint) -> str:
    """The sentence a hint adds to the problem statement ('' when it adds nothing)."""
    meta = task.meta()
    file, function = meta.get("file"), meta.get("function")
    if hint == "function" and file and function:
        return hint_sentence(file, function)
    if hint in ("file", "function") and file:
        return hint_sentence(file)
    return ""


def hint_sentence(file: str, function: str | None = None) -> str:
    """`The bug is in FUNCTION of FILE.`, or `The bug is in FILE.` without a function."""
    return f"The bug is in {function} of {file}." if function else f"The bug is in {file}."


def with_hint(task: Task, hint: Hint) -> Task:
    """`task` whose problem statement carries `hint`."""
    line = hint_line(task, hint)
    return replace(task, problem_statement=f"{task.problem_statement.rstrip()}\n{line}") if line else task


def select_tasks(tasks: Sequence[Task], train: int, heldout: int, seed: int) -> list[Task]:
    """At most `train` training and `heldout` held-out tasks of `tasks`, drawn by `seed`
    (all of a split when it has no more), in the corpus's order."""
    chosen: set[str] = set()
    for split, limit in (("train", train), ("heldout", heldout)):
        ids = sorted(t.instance_id for t in tasks if t.split == split)
        chosen |= set(ids if len(ids) <= limit else random.Random(f"{seed}-{split}").sample(ids, limit))
    return [t for t in tasks if t.instance_id in chosen]
