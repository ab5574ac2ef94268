"""Copy drills: short statements whose hint names a file and a function never seen
together, answered by the `view` of exactly those names.

A tiny model trained from scratch on a few projects' demonstrations writes their names
from memory, and on a project it never saw it names no right file
(docs/2026-12-06-real-task-gate.md). Copying a name from the statement takes an
induction circuit, and that circuit forms in a phase change: the drills' loss sits near
3.5 for a few hundred steps, then falls below 0.3 (32 drills a step, about 1 s each on 2
cores). Drills are cheap to learn it on; long repository episodes are not (300 steps of
them left it unformed). So the warm start drills first (trainer.sft.copy_drill_steps),
then learns the tools on the repository demonstrations.

The names are real: the functions and classes of the Python code installed beside the
trainer (the standard library and site-packages, about 100,000 names), too many to
recall, so copying is the one way to lower the loss. Names from a few projects' code, or
joined from random letters, did not teach it: drilled on those, the model copied 0-2% of
the names of a project it never saw; drilled on installed code's names, it copied them.
"""

from __future__ import annotations

import functools
import random
import re
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from engines.env.task_sources.selection import hint_sentence

_DEF = re.compile(r"^\s*def ([A-Za-z_]\w*)", re.M)
_CLASS = re.compile(r"^class ([A-Za-z_]\w*)", re.M)
# A file's first part holds most of its names; reading no more keeps the pool's build
# to seconds over the ~30,000 installed files.
_READ_BYTES = 20_000
# Code lines kept for statements' failure text: the first ones, then one in 25 (about 100,000).
_LINES_FIRST, _LINES_EVERY = 1_000, 25
_ERRORS = (
    "AssertionError",
    "AssertionError",
    "AssertionError",
    "TypeError",
    "ValueError",
    "KeyError",
    "AttributeError",
)
_STATEMENT_CHARS = 1500  # the builder's cut (engines/env/task_sources/builder.py: _problem_statement)
Statement = Literal["hint", "short", "long"]


class NamePool:
    """Functions and classes of some code, the words their names are made of, and some of
    its lines."""

    def __init__(self, code: Iterable[str]) -> None:
        functions: set[str] = set()
        classes: set[str] = set()
        self.lines: list[str] = []
        seen = 0
        for text in code:
            functions.update(n for n in _DEF.findall(text) if not n.startswith("test"))
            classes.update(_CLASS.findall(text))
            for line in text.splitlines():
                line = line.strip()
                if 8 <= len(line) <= 120 and not line.startswith(("#", '"', "'")):
                    seen += 1
                    if seen <= _LINES_FIRST or seen % _LINES_EVERY == 0:
                        self.lines.append(line)
        self.functions, self.classes = sorted(functions), sorted(classes)
        words = {w.lower() for n in [*self.functions, *self.classes] for w in _words(n)}
        self.words = sorted(w for w in words if w.isidentifier() and len(w) > 1)
        if len(self.words) < 8 or not self.classes or not self.lines:
            raise ValueError(f"copy drills need names to draw from: the code holds {len(self.words)} words")

    def function(self, rng: random.Random) -> str:
        return rng.choice(self.functions)

    def klass(self, rng: random.Random) -> str:
        return rng.choice(self.classes)

    def module(self, rng: random.Random) -> str:
        return "_".join(rng.choice(self.words) for _ in range(rng.randint(1, 2)))


def installed_files() -> Iterator[tuple[str, Path]]:
    """The Python files installed beside the trainer, tests left out, in a fixed order:
    each file's path as its package names it (`json/decoder.py`), and where it is."""
    paths = sysconfig.get_paths()
    for root in dict.fromkeys(Path(paths[key]) for key in ("stdlib", "purelib")):
        for path in sorted(root.rglob("*.py")):
            inside = path.relative_to(root).parts
            if "site-packages" in inside or any("test" in part for part in inside):
                continue
            yield "/".join(inside), path


def installed_code() -> Iterator[str]:
    """The source of the installed Python code (`installed_files`), each file's first `_READ_BYTES`."""
    for _, path in installed_files():
        try:
            with open(path, encoding="utf-8", errors="ignore") as f:
                yield f.read(_READ_BYTES)
        except OSError:
            continue


def installed_sample(chars: int, seed: int, max_bytes: int = 60_000) -> list[str]:
    """Whole installed files (`installed_files`, each at most `max_bytes`) drawn by `seed`
    until they hold `chars` characters: code that no project of a corpus owns."""
    files = [path for _, path in installed_files() if path.stat().st_size <= max_bytes]
    random.Random(seed).shuffle(files)
    sample, size = [], 0
    for path in files:
        if size >= chars:
            break
        sample.append(path.read_text(encoding="utf-8", errors="ignore"))
        size += len(sample[-1])
    return sample


@functools.cache
def installed_pool() -> NamePool:
    """The `NamePool` of `installed_code`, read once a process."""
    return NamePool(installed_code())


def _words(name: str) -> list[str]:
    """`_compile_mapping` -> compile, mapping; `LRUCache` -> lru, cache."""
    return re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", name)


def drill_statement(
    pool: NamePool, rng: random.Random, package: str, module: str, function: str, hint: str, long: bool = True
) -> str:
    """A statement as the builder writes one (engines/env/task_sources/builder.py): 1 to 8
    `FAILED` lines, the first of `module`'s test of `function`, 0 to 12 lines of assertion
    output, all cut at 1,500 characters, then `hint`. The failures' text is lines of the
    pool's code, so the hint is one line after hundreds of tokens of code, as in a real
    statement: a model drilled on short statements alone copied a hint after 100 tokens
    and garbled it after 500. Not `long`: that one failure, no text, no output (the
    short statements the copying circuit forms on)."""
    version = ".".join(str(rng.randint(0, 12)) for _ in range(3))
    head = f"Some tests of {package} {version} fail. Fix the source code so they pass; the tests are correct.\n"
    tests = [f"tests/test_{module}.py::test_{function.strip('_')}"]
    if not long:
        return f"{head}Failing tests:\nFAILED {tests[0]} - AssertionError\n{hint}"
    tests += [
        f"tests/test_{pool.module(rng)}.py::test_{pool.function(rng).strip('_')}" for _ in range(rng.randint(0, 7))
    ]
    failed = [_cut(f"FAILED {test} - {rng.choice(_ERRORS)}: {rng.choice(pool.lines)}") for test in tests]
    output = [
        f"E   {rng.choice(_ERRORS)}: {rng.choice(pool.lines)}"
        if i == 0 or rng.random() < 0.3
        else f"E    +  where {rng.choice(pool.lines)}"
        for i in range(rng.randint(0, 12))
    ]
    text = (
        head + "Failing tests:\n" + "\n".join(failed) + ("\nAssertion output:\n" + "\n".join(output) if output else "")
    )
    if len(text) > _STATEMENT_CHARS:
        text = text[: _STATEMENT_CHARS - 15] + "\n[truncated]"
    return f"{text}\n{hint}"


def _cut(line: str, width: int = 80) -> str:
    """pytest's short summary line at its terminal width."""
    return line if len(line) <= width else line[: width - 3] + "..."


def copy_drill(pool: NamePool, rng: random.Random, statement: Statement = "long") -> list[dict[str, str]]:
    """One drill: a statement shaped like the builder's (`drill_statement`; `statement` =
    'hint': the hint line alone), its hint, and the `view` of what it names."""
    package, module = pool.module(rng), pool.module(rng)
    folders = [package, *([pool.module(rng)] if rng.random() < 0.3 else [])]
    path = "/".join([*(["src"] if rng.random() < 0.2 else []), *folders, f"{module}.py"])
    function = pool.function(rng)
    scope = f"{pool.klass(rng)}.{function}" if rng.random() < 0.6 else function
    text = hint_sentence(path, scope)
    if statement != "hint":
        text = drill_statement(pool, rng, package, module, function, text, statement == "long")
    return [{"role": "user", "content": text}, {"role": "assistant", "content": f"view {path} {scope}"}]


def copy_drills(
    count: int, seed: int, code: Sequence[str] | None = None, statement: Statement = "long"
) -> list[list[dict[str, str]]]:
    """`count` drills drawn by `seed`, their names from `code`, or from the installed code
    (`installed_code`) when None. `statement`: 'long' as long as the builder's, 'short' one
    failure and the hint, 'hint' the hint line alone (`drill_statement`)."""
    pool, rng = installed_pool() if code is None else NamePool(code), random.Random(seed)
    return [copy_drill(pool, rng, statement) for _ in range(count)]
