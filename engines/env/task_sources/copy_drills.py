"""Copy drills: short statements whose hint names a file and a function never seen
together, answered by the `view` of exactly those names.

A tiny model trained from scratch on a few projects' demonstrations writes their names
from memory, and on a project it never saw it names no right file
(docs/2026-12-06-real-task-gate.md). Copying a name from the statement takes an
induction circuit, and that circuit forms in a phase change: on drills of about 60
tokens the loss sat near 3.5 for 300 steps, then fell below 0.3 by step 700 (32 drills a
step, 0.65 s each on 2 cores). Drills are cheap to learn it on; long repository episodes
are not (300 steps of them left it unformed). So the warm start drills first
(trainer.sft.copy_drill_steps), then learns the tools on the repository demonstrations.

Names are the training code's own functions and classes now and then, otherwise joined
from its words and from random letters (`_cache_qzvt`, `RowKebs`), so no name repeats
often enough to be recalled: copying is the one way to lower the loss.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence

from engines.env.task_sources.selection import hint_sentence

# Shares of the code's own names and words; the rest are random letters. Names from the
# code alone (a few thousand) were partly recalled: a model drilled on them to a loss of
# 0.43 copied 1.7% of the names of a project it never saw.
_OWN_NAMES = 0.2
_OWN_WORDS = 0.3
_DEF = re.compile(r"^\s*def ([A-Za-z_]\w*)", re.M)
_CLASS = re.compile(r"^class ([A-Za-z_]\w*)", re.M)


class NamePool:
    """Functions and classes of some code, and the words their names are made of."""

    def __init__(self, code: Sequence[str]) -> None:
        text = "\n".join(code)
        self.functions = sorted({n for n in _DEF.findall(text) if not n.startswith(("__", "test"))})
        self.classes = sorted(set(_CLASS.findall(text)))
        words = {w.lower() for n in [*self.functions, *self.classes] for w in _words(n)}
        self.words = sorted(w for w in words if w.isidentifier() and len(w) > 1)
        if len(self.words) < 8:
            raise ValueError(f"copy drills need names to draw from: the training code holds {len(self.words)} words")

    def function(self, rng: random.Random) -> str:
        if self.functions and rng.random() < _OWN_NAMES:
            return rng.choice(self.functions)
        name = "_".join(self.word(rng) for _ in range(rng.randint(1, 3)))
        return f"_{name}" if rng.random() < 0.25 else name

    def klass(self, rng: random.Random) -> str:
        if self.classes and rng.random() < _OWN_NAMES:
            return rng.choice(self.classes)
        return "".join(self.word(rng).capitalize() for _ in range(rng.randint(1, 2)))

    def module(self, rng: random.Random) -> str:
        return "_".join(self.word(rng) for _ in range(rng.randint(1, 2)))

    def word(self, rng: random.Random) -> str:
        """A word of the code, or letters no code holds: a name built of those is never
        recalled, only copied."""
        if rng.random() < _OWN_WORDS:
            return rng.choice(self.words)
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 8)))


def _words(name: str) -> list[str]:
    """`_compile_mapping` -> compile, mapping; `LRUCache` -> lru, cache."""
    return re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", name)


def copy_drill(pool: NamePool, rng: random.Random) -> list[dict[str, str]]:
    """One drill: a statement shaped like the builder's, its hint, and the `view` of what it names."""
    package, module = pool.module(rng), pool.module(rng)
    folders = [package, *([pool.module(rng)] if rng.random() < 0.3 else [])]
    path = "/".join([*(["src"] if rng.random() < 0.2 else []), *folders, f"{module}.py"])
    function = pool.function(rng)
    scope = f"{pool.klass(rng)}.{function}" if rng.random() < 0.6 else function
    version = ".".join(str(rng.randint(0, 12)) for _ in range(3))
    statement = (
        f"Some tests of {package} {version} fail. Fix the source code so they pass; the tests are correct.\n"
        f"Failing tests:\nFAILED tests/test_{module}.py::test_{function.strip('_')} - AssertionError\n"
        + hint_sentence(path, scope)
    )
    return [{"role": "user", "content": statement}, {"role": "assistant", "content": f"view {path} {scope}"}]


def copy_drills(count: int, seed: int, code: Sequence[str]) -> list[list[dict[str, str]]]:
    """`count` drills with names from `code` (the training projects' source), drawn by `seed`."""
    pool, rng = NamePool(code), random.Random(seed)
    return [copy_drill(pool, rng) for _ in range(count)]
