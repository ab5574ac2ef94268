"""Repository demonstrations with the names the hint gives replaced by made-up ones.

A warm start trained on a few projects' demonstrations writes their file and function
names from memory: on a project it never saw it names no right file
(docs/2026-12-06-real-task-gate.md). In a renamed copy the hinted file's package and
module, the class and the function are replaced in every message of the episode
(statement, views, edits, verdicts) by names joined from the words of the installed
code's names (engines/env/task_sources/copy_drills.py: about 15,000), so the one way to
write them is to copy them from the statement: what a project never trained on asks for.
A small word list does not do that: renamed with about a hundred words, the warm start
learned to write new joins of them, on a project never trained on too
(docs/2026-12-06-real-task-gate.md).

The replacement is textual and consistent, so every edit's OLD still stands in the
view it was copied from. Dunder names (`__init__`, `__getitem__`) and `src` keep their
names: they are shared by every project, not recalled from one.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from engines.env.task_sources.copy_drills import installed_pool

# The sentence engines/env/task_sources/selection.py: hint_line appends to a statement.
_HINT = re.compile(r"^The bug is in (?:(?P<function>\S+) of )?(?P<file>\S+)\.$", re.M)
_KEPT = {"src", "lib", "tests"}


def hinted_names(statement: str) -> list[str]:
    """The identifiers the hint line of `statement` names: the file's folders and module,
    the class and the function (none without a hint line)."""
    match = _HINT.search(statement)
    if not match:
        return []
    path = match["file"].removesuffix(".py").split("/")
    scope = (match["function"] or "").split(".")
    names = [n for n in (*path, *scope) if n.isidentifier() and n not in _KEPT and not n.startswith("__")]
    return list(dict.fromkeys(names))


def made_up_name(original: str, rng: random.Random, taken: str, words: Sequence[str]) -> str:
    """Two or three of `words` in `original`'s case (CamelCase for a class, snake_case
    otherwise, a leading `_` kept), absent from `taken`."""
    while True:
        picked = rng.sample(words, rng.randint(2, 3))
        name = "".join(w.capitalize() for w in picked) if original[:1].isupper() else "_".join(picked)
        name = "_" * (len(original) - len(original.lstrip("_"))) + name
        if not re.search(rf"\b{name}\b", taken):
            return name


def renamed(demo: list[dict], rng: random.Random, words: Sequence[str] | None = None) -> list[dict]:
    """`demo` with the names its statement's hint gives replaced in every message by made-up
    ones, joined from `words` (the installed code's when None); `demo` itself when its
    statement has no hint."""
    statement = next((m["content"] for m in demo if m["role"] == "user"), "")
    names = hinted_names(statement)
    if not names:
        return demo
    text, words = "\n".join(m["content"] for m in demo), words or installed_pool().words
    mapping: dict[str, str] = {}
    for name in names:
        mapping[name] = made_up_name(name, rng, text + " ".join(mapping.values()), words)
    # Whole identifiers only: `table` in `tinydb/table.py` and `self.table`, not in `test_table`.
    pattern = re.compile(
        r"(?<![\w])(" + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True))) + r")(?![\w])"
    )
    return [{**m, "content": pattern.sub(lambda k: mapping[k[1]], m["content"])} for m in demo]


def renamed_share(demos: Sequence[list[dict]], share: float, seed: int) -> list[list[dict]]:
    """`demos` with about `share` of them renamed (drawn by `seed`), the rest as they were."""
    rng = random.Random(seed)
    return [renamed(d, rng) if rng.random() < share else d for d in demos]
