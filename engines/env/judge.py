"""The strict judge: a patch that passed the tests must compute what the original code computes.

The tests run in the same process as the code they judge, so an object equal to
everything, a float where an int was, a rewritten pytest or an answer table keyed by
the tests' own inputs can pass them. For tasks whose original code is known (every
generated micro task, every builder task: the gold patch restores it), the grader
asks a second judge once the tests pass: the functions the task is about, called on
the tests' own inputs in a separate sandboxed process that never loads pytest
(judge_script.py), on the patched tree and on the fixed one. Their answers must be
equal value for value with the same exact types (a `bool` is no `int`, a subclass of
`int` is no `int`), and an exception must be of the same type; otherwise the patch is
not resolved (flag `strict_judge`).

Inputs: every call of a judged function in the task's test files whose arguments are
literals or builtin names (`f(6, 8)`, `groupby(len, ["a", "bb"])`). Micro tasks,
whose functions take small integers, get more: every pair of integers in the range
the tests use, widened by two (not below zero when the tests never go there), so an
answer table keyed by the tested inputs disagrees on the next input. Judged
functions: a micro task's module-level functions, a builder task's mutated function
when it is a module-level one (a method needs an instance the tests build in code
the judge does not run). Imported tasks, and tasks with neither, keep the tests as
their judge (and the patch monitor, monitor.py).

The answer is written by a process the patched code runs in, so this is no boundary
against code that forges it (the monitor's rules cover those channels); it is a
judge of values, which the tests' own comparisons are not.
"""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
import json
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path

from engines.env.parse import parse_module
from engines.env.patches import protected_files
from engines.env.types import Task
from engines.env.workspace import base_files

SCRIPT = Path(__file__).with_name("judge_script.py").read_text()
MAX_CALLS = 2_000
_BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
_GRID_VALUES = 12  # integers per argument in a micro task's generated inputs


@dataclass(frozen=True)
class JudgeSpec:
    """What the judge calls: `module`'s functions on argument sources."""

    module: str
    calls: tuple[tuple[str, str, str], ...]  # (function, args tuple source, kwargs dict source)

    def text(self) -> str:
        return json.dumps({"module": self.module, "calls": [list(c) for c in self.calls]})


@functools.lru_cache(maxsize=256)
def judge_spec(task: Task) -> JudgeSpec | None:
    """The calls that judge `task`'s patches; None when the task has no known original
    or its tests give the judge no input."""
    meta = task.meta()
    path = meta.get("file")
    if not isinstance(path, str) or not path.endswith(".py") or " -m pytest" not in task.test_cmd:
        return None
    if task.env_name == "micro":
        functions = None  # every module-level function
    elif "bug_patch" in meta and isinstance(meta.get("function"), str) and "." not in meta["function"]:
        functions = {meta["function"]}
    else:
        return None
    files = base_files(task)
    if path not in files:
        return None
    defined = _module_functions(files[path])
    judged = defined if functions is None else defined & functions
    calls = _test_calls(task, files, judged)
    if task.env_name == "micro":
        calls = _with_integer_grid(calls)
    if not calls:
        return None
    return JudgeSpec(_module_name(path), tuple(calls[:MAX_CALLS]))


def judge_command(task: Task, spec: JudgeSpec, nonce: str) -> str:
    """The shell command that runs the judge in the repository's root, with the test
    command's interpreter and PYTHONPATH."""
    python = task.test_cmd.split(" -m pytest", 1)[0]
    return f"{python} -c {shlex.quote(SCRIPT)} {shlex.quote(nonce)} {shlex.quote(spec.text())}"


def read_answers(output: str, nonce: str) -> list | None:
    """The judge's answer in `output`; None when there is not exactly one."""
    lines = [line[len(nonce) :] for line in output.splitlines() if line.startswith(nonce)]
    if len(lines) != 1:
        return None
    try:
        answers = json.loads(lines[0])
    except ValueError:
        return None
    return answers if isinstance(answers, list) else None


def disagreement(spec: JudgeSpec, expected: list, got: list | None) -> str | None:
    """The first call whose answers differ, described for the grade's note; None when all agree."""
    if got is None:
        return "the patched code gave the judge no answer (it exited, hung or failed to import)"
    if len(got) != len(expected):
        return f"the patched code answered {len(got)} of {len(expected)} calls"
    for (name, args, kwargs), want, have in zip(spec.calls, expected, got):
        if want != have:
            call = name + args + ("" if kwargs == "{}" else f" with {kwargs}")
            return f"{call} gave {_shown(have)}, the original {_shown(want)}"
    return None


def _shown(answer: list) -> str:
    kind, value = answer
    if kind == "raise":
        return f"raised {value}"
    type_name, content = value
    return f"{type_name} {content!r}"[:200]


def _module_functions(source: bytes) -> frozenset[str]:
    try:
        tree = parse_module(source)
    except SyntaxError:
        return frozenset()
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef))


def _module_name(path: str) -> str:
    parts = posixpath.normpath(path)[: -len(".py")].split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]  # the src layout: the test command puts src on PYTHONPATH
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _test_calls(task: Task, files: dict[str, bytes], judged: frozenset[str]) -> list[tuple[str, str, str]]:
    """Calls of `judged` functions in the task's test files with plain arguments, in order, once each."""
    calls: dict[tuple[str, str, str], None] = {}
    for path in sorted(protected_files(task)):
        if path not in files or not path.endswith(".py"):
            continue
        try:
            tree = parse_module(files[path])
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (name := _called_name(node.func)) in judged and _plain_call(node):
                args = _tuple_source([ast.unparse(a) for a in node.args])
                kwargs = "{" + ", ".join(f"{k.arg!r}: {ast.unparse(k.value)}" for k in node.keywords) + "}"
                calls[(name, args, kwargs)] = None
    return list(calls)


def _tuple_source(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _plain_call(node: ast.Call) -> bool:
    """Arguments of literals, containers of them and builtin names only; no * or **."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return False
    return all(_plain(a) for a in [*node.args, *(k.value for k in node.keywords)])


def _plain(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in _BUILTIN_NAMES
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _plain(node.operand)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_plain(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _plain(k) for k in node.keys) and all(_plain(v) for v in node.values)
    return False


def _with_integer_grid(calls: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """`calls` and, per function called only with integer positional arguments, every
    combination over the tests' range of each argument widened by two (kept at zero or
    above when the tests are), at most _GRID_VALUES values per argument."""
    by_function: dict[str, list[tuple[int, ...]]] = {}
    for name, args, kwargs in calls:
        values = _literal(args) if kwargs == "{}" else None
        if values is not None and values and all(type(v) is int for v in values):
            by_function.setdefault(name, []).append(values)
        else:
            by_function[name] = []  # not all integers: no grid for this function
    out = dict.fromkeys(calls)
    for name, seen in by_function.items():
        if not seen or len({len(v) for v in seen}) != 1 or len(seen[0]) > 3:
            continue
        axes = [_axis([v[i] for v in seen]) for i in range(len(seen[0]))]
        for point in itertools.product(*axes):
            out[(name, _tuple_source([str(v) for v in point]), "{}")] = None
    return list(out)


def _literal(source: str) -> object:
    try:
        return ast.literal_eval(source)
    except ValueError:  # a builtin name among the arguments
        return None


def _axis(values: list[int]) -> list[int]:
    lo, hi = min(values) - 2, max(values) + 2
    if min(values) >= 0:
        lo = max(lo, 0)
    span = hi - lo + 1
    if span <= _GRID_VALUES:
        return list(range(lo, hi + 1))
    return sorted({lo + round(i * (span - 1) / (_GRID_VALUES - 1)) for i in range(_GRID_VALUES)} | set(values))
