"""Micro tasks: generated Python modules with one injected bug (the fix in each edit form: edit_forms.py).

Sized for a tiny model trained from scratch on CPU: a module `m.py` of 2 to 4
small integer functions (5 to 20 lines in all), one bug injected by an AST
mutation (arithmetic swap, comparison flip, constant +-1, swapped operands,
removed `not` or unary minus), and `test_m.py` whose expected values come from
running the original. A task is kept only when the original passes every test
and the mutant fails at least one without failing to import; that check runs
in-process (no sandbox, thousands of tasks a second) because the code is ours;
the sandboxed grader gives the final grade.

The problem statement is the numbered buggy file plus the first failing test's
call, expected and actual value: what a model needs, not the answer.
Modules are capped at 16 lines so the whole oracle episode is about 150 tokens.
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass

from engines.env.parse import parse_module
from engines.env.sandbox.plain_runner import PLAIN_TEST_CMD
from engines.env.types import Split, Task
from engines.env.views import numbered
from engines.env.workspace import tree_hash, unified_diff

MODULE = "m.py"
TEST_MODULE = "test_m.py"
TEST_CMD = PLAIN_TEST_CMD  # plain `def test_*` functions: the plain runner can call them directly
LOG_PARSER = "parse_log_pytest"
_NAMES = [
    "area",
    "clip",
    "diff",
    "step",
    "mix",
    "span",
    "pick",
    "gap",
    "tally",
    "shift",
    "score",
    "scale",
    "fold",
    "bump",
    "cap",
    "edge",
]
# Words of compound names (`merge_index`, `_parse_total`): with `compound_names` no name
# repeats often enough to be remembered, so a model learns to copy it from the statement.
NAME_WORDS = [
    *_NAMES,
    "count", "merge", "parse", "value", "index", "total", "limit", "items", "lookup", "update",
    "resolve", "compile", "mapping", "cache", "entry", "table", "split", "order", "group", "match",
    "range", "delta", "weight", "round", "check", "bound", "offset", "ratio", "level", "slot",
]  # fmt: skip
_CASES_PER_FUNCTION = 2
_MAX_LINES = 16  # module size bound (lines): keeps the whole oracle episode near 150 tokens


# ---- program generation -------------------------------------------------------------


def _int_body(rng: random.Random) -> list[str]:
    k = lambda lo=1, hi=6: str(rng.randint(lo, hi))  # noqa: E731 - small constants keep values small
    op = lambda: rng.choice(["+", "-", "*"])  # noqa: E731
    cmp = lambda: rng.choice(["<", ">", "<=", ">=", "==", "!="])  # noqa: E731
    shapes = [
        [f"c = a {op()} b", f"if c {cmp()} {k()}:", f"    return c {op()} {k()}", f"return -c {op()} a"],
        [f"t = {k(0, 3)}", "for i in range(a):", f"    t = t {op()} i", f"return t {op()} b"],
        [f"if not a {cmp()} b:", f"    return a {op()} {k()}", f"return b - a {op()} {k()}"],
        [f"c = a // {k(2, 5)}", f"d = b % {k(2, 5)}", f"return c {op()} d"],
        [f"if a {cmp()} {k()} and b {cmp()} {k()}:", f"    return -a {op()} b", f"return a {op()} b {op()} {k()}"],
        [f"n = {k(0, 2)}", "for i in range(b):", f"    if i {cmp()} a:", f"        n = n {op()} {k()}", "return n"],
        [f"c = {k()} - a", f"return max(c, b) {op()} {k()}"],
    ]
    return rng.choice(shapes)


def _compound_name(rng: random.Random) -> str:
    """Two or three words joined by `_`, a leading `_` one time in four."""
    name = "_".join(rng.sample(NAME_WORDS, rng.randint(2, 3)))
    return f"_{name}" if rng.random() < 0.25 else name


def _module(rng: random.Random, compound_names: bool = False) -> str:
    if compound_names:
        names = list(dict.fromkeys(_compound_name(rng) for _ in range(rng.randint(2, 4))))
    else:
        names = rng.sample(_NAMES, rng.randint(2, 4))
    lines: list[str] = []
    for i, name in enumerate(names):
        body = ["    " + line for line in _int_body(rng)]
        if i >= 2 and len(lines) + 1 + len(body) > _MAX_LINES:
            break
        lines += [f"def {name}(a, b):", *body]
    return "\n".join(lines)  # no blank lines: every line costs prompt tokens


# ---- mutation -------------------------------------------------------------------------

_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv}
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_ASYMMETRIC = (ast.Sub, ast.FloorDiv, ast.Mod)


def _candidates(tree: ast.AST) -> list[tuple[int, str]]:
    """(index in ast.walk order, bug kind) for every node a mutation applies to."""
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            out.append((i, "arithmetic"))
            if isinstance(node.op, _ASYMMETRIC):
                out.append((i, "swapped_operands"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
            out += [(i, "comparison"), (i, "swapped_operands")]
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            out.append((i, "constant"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            out.append((i, "removed_not" if isinstance(node.op, ast.Not) else "removed_minus"))
    return out


class _Mutate(ast.NodeTransformer):
    def __init__(self, target: ast.AST, kind: str, rng: random.Random):
        self.target, self.kind, self.rng = target, kind, rng

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            return self.generic_visit(node)
        if self.kind == "arithmetic":
            node.op = _ARITH[type(node.op)]()
        elif self.kind == "comparison":
            node.ops = [_FLIP[type(node.ops[0])]()]
        elif self.kind == "swapped_operands" and isinstance(node, ast.BinOp):
            node.left, node.right = node.right, node.left
        elif self.kind == "swapped_operands":
            node.left, node.comparators = node.comparators[0], [node.left]
        elif self.kind == "constant":
            node.value = node.value + self.rng.choice([-1, 1])
        else:  # removed not / unary minus
            return node.operand
        return node


def _header(stmt: ast.stmt) -> str:
    """The one source line of a simple statement or of a compound statement's header."""
    if isinstance(stmt, ast.If):
        return f"if {ast.unparse(stmt.test)}:"
    if isinstance(stmt, ast.For):
        return f"for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}:"
    return ast.unparse(stmt)


def _mutate(source: str, rng: random.Random) -> tuple[str, str, int] | None:
    """Mutate one line; returns (mutant, bug kind, 1-based line) or None.

    The kind is drawn uniformly among the kinds the module offers, so rare kinds
    (removed `not`, comparisons) are not drowned by arithmetic.
    """
    lines = source.split("\n")
    by_kind: dict[str, list[tuple[ast.stmt, ast.AST, int]]] = {}
    for stmt in ast.walk(parse_module(source)):
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, ast.FunctionDef):
            continue
        old = lines[stmt.lineno - 1]
        if old[: len(old) - len(old.lstrip())] + _header(stmt) != old:
            continue  # not in canonical form: a mutant would differ in more than the bug
        root = stmt.test if isinstance(stmt, ast.If) else stmt.iter if isinstance(stmt, ast.For) else stmt
        for index, kind in _candidates(root):
            by_kind.setdefault(kind, []).append((stmt, root, index))
    if not by_kind:
        return None
    kind = rng.choice(sorted(by_kind))
    stmt, root, index = rng.choice(by_kind[kind])
    old = lines[stmt.lineno - 1]
    target = next(n for i, n in enumerate(ast.walk(root)) if i == index)
    _Mutate(target, kind, rng).visit(stmt)
    new = old[: len(old) - len(old.lstrip())] + _header(stmt)
    if new == old:
        return None
    lines[stmt.lineno - 1] = new
    return "\n".join(lines), kind, stmt.lineno


# Inverses of the mutation kinds above: the ops a mutation could have come from.
_ARITH_FROM: dict[type, list[type]] = {}
for _src, _dst in _ARITH.items():
    _ARITH_FROM.setdefault(_dst, []).append(_src)


def _inverse_mutations(node: ast.AST) -> list[tuple[str, object]]:
    """(kind, argument) of every edit that would undo a mutation of `node`'s kind."""
    out: list[tuple[str, object]] = []
    if isinstance(node, ast.BinOp):
        out += [("arithmetic", op) for op in _ARITH_FROM.get(type(node.op), [])]
        if isinstance(node.op, _ASYMMETRIC):
            out.append(("swapped_operands", None))
        out += [("removed_minus", side) for side in ("left", "right") if isinstance(getattr(node, side), ast.Name)]
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
        out += [("comparison", _FLIP[type(node.ops[0])]), ("swapped_operands", None), ("removed_not", None)]
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        out += [("constant", -1), ("constant", 1)]
    return out


class _Undo(ast.NodeTransformer):
    def __init__(self, target: ast.AST, kind: str, arg: object):
        self.target, self.kind, self.arg = target, kind, arg

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            return self.generic_visit(node)
        if self.kind == "arithmetic":
            node.op = self.arg()
        elif self.kind == "comparison":
            node.ops = [self.arg()]
        elif self.kind == "swapped_operands" and isinstance(node, ast.BinOp):
            node.left, node.right = node.right, node.left
        elif self.kind == "swapped_operands":
            node.left, node.comparators = node.comparators[0], [node.left]
        elif self.kind == "constant":
            node.value = node.value + self.arg
        elif self.kind == "removed_not":
            return ast.UnaryOp(ast.Not(), node)
        else:  # removed minus: negate one operand
            setattr(node, self.arg, ast.UnaryOp(ast.USub(), getattr(node, self.arg)))
        return node


def plausible_edits(source: str, function: str) -> list[tuple[int, str, str]]:
    """(1-based line, new line, kind) of every edit of function `function` that undoes
    one of the generator's mutation kinds: the candidates a searcher who knows the bug
    kinds, but not the bug, would try. Distinct (line, text) pairs, in file order."""
    lines = source.rstrip("\n").split("\n")
    tree = parse_module(source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    out: dict[tuple[int, str], str] = {}
    for stmt in ast.walk(func):
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, ast.FunctionDef):
            continue
        old = lines[stmt.lineno - 1]
        indent = old[: len(old) - len(old.lstrip())]
        if indent + _header(stmt) != old:
            continue
        for index, node in enumerate(ast.walk(_root(stmt))):
            for kind, arg in _inverse_mutations(node):
                copy = parse_module(
                    ast.unparse(stmt) if not isinstance(stmt, (ast.If, ast.For)) else _header(stmt) + " pass"
                )
                root = _root(copy.body[0])
                target = next(n for i, n in enumerate(ast.walk(root)) if i == index)
                _Undo(target, kind, arg).visit(copy.body[0])
                new = indent + _header(copy.body[0])
                if new != old:
                    out.setdefault((stmt.lineno, new), kind)
    return [(line, text, kind) for (line, text), kind in out.items()]


def _root(stmt: ast.stmt) -> ast.AST:
    """The part of a statement its one source line holds (a header's test or iterable)."""
    return stmt.test if isinstance(stmt, ast.If) else stmt.iter if isinstance(stmt, ast.For) else stmt


def named_function(task: Task) -> str:
    """The function the task's failing call names (the problem statement's last line)."""
    call = task.problem_statement.rsplit("\n", 1)[-1]
    return call[: call.index("(")]


def mutate_line(source: str, rng: random.Random) -> tuple[int, str] | None:
    """One single-token mutation of `source` as (1-based line, new line text)."""
    mutated = _mutate(source, rng)
    if mutated is None:
        return None
    text, _, line = mutated
    return line, text.split("\n")[line - 1]


# ---- validation and task assembly -----------------------------------------------------


@dataclass(frozen=True)
class _Case:
    test: str  # test function name
    name: str  # function under test
    args: tuple[int, ...]
    expected: object = None

    @property
    def call(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.args))})"


def run_module(source: str) -> dict | None:
    """Execute generator-made code in-process with a few builtins; None when it does not load."""
    namespace: dict = {"__builtins__": {"max": max, "min": min, "range": range, "abs": abs}}
    try:
        exec(compile(source, MODULE, "exec"), namespace)
    except Exception:
        return None
    return namespace


def _call(namespace: dict, case: _Case) -> tuple[bool, object]:
    try:
        return True, namespace[case.name](*case.args)
    except Exception as exc:  # the mutant may raise: that is a failing test, not an import error
        return False, f"{type(exc).__name__}: {exc}"


def _make_cases(original: str, rng: random.Random) -> list[_Case] | None:
    ns = run_module(original)
    if ns is None:
        return None
    cases = []
    # Function names in order of definition (the generator writes one `def NAME(a, b):` each).
    names = [line[4 : line.index("(")] for line in original.split("\n") if line.startswith("def ")]
    for name in names:
        for j in range(_CASES_PER_FUNCTION):
            case = _Case(f"test_{name}_{j}", name, (rng.randint(0, 9), rng.randint(0, 9)))
            ok, value = _call(ns, case)
            if not ok:
                return None
            cases.append(_Case(case.test, case.name, case.args, value))
    return cases


def _test_file(cases: list[_Case]) -> str:
    names = ", ".join(dict.fromkeys(c.name for c in cases))
    blocks = [f"from m import {names}\n"] + [
        f"\ndef {c.test}():\n    assert {c.call} == {c.expected!r}\n" for c in cases
    ]
    return "".join(blocks)


def _failing_mutant(original: str, cases: list[_Case], rng: random.Random):
    mutated = _mutate(original, rng)
    if mutated is None:
        return None
    ns = run_module(mutated[0])
    if ns is None:
        return None  # import error: not a bug a test run could point at
    failing = []
    for case in cases:
        ok, actual = _call(ns, case)
        if not ok or actual != case.expected:
            failing.append((case, actual))
    return (*mutated, failing) if failing else None


def make_micro_task(
    rng: random.Random, instance_id: str, split: Split = "train", compound_names: bool = False
) -> Task | None:
    """One attempt at a task; None when the sampled program or mutant is not usable."""
    original = _module(rng, compound_names)
    cases = _make_cases(original, rng)
    if cases is None:
        return None
    for _ in range(4):  # a few mutants of the same program before sampling a new one
        found = _failing_mutant(original, cases, rng)
        if found is not None:
            break
    else:
        return None
    buggy, kind, line, failing = found
    first, actual = failing[0]
    tests = _test_file(cases)
    base = {MODULE: buggy + "\n", TEST_MODULE: tests}
    fixed = {MODULE: original + "\n", TEST_MODULE: tests}
    got = actual if isinstance(actual, str) else repr(actual)
    statement = f"{MODULE}\n{numbered(buggy)}\n{first.call} expected {first.expected!r}, got {got}"
    failing_ids = {c.test for c, _ in failing}
    meta = {
        "files": base,
        "bug": kind,
        "file": MODULE,
        "line": line,
        "fixed_line": original.splitlines()[line - 1],
        "test_files": [TEST_MODULE],
    }
    return Task(
        instance_id=instance_id,
        repo="micro",
        version="1",
        base_commit=tree_hash({k: v.encode() for k, v in base.items()}),
        problem_statement=statement,
        patch=unified_diff(_enc(base), _enc(fixed)),
        test_patch="",
        FAIL_TO_PASS=tuple(f"{TEST_MODULE}::{c.test}" for c in cases if c.test in failing_ids),
        PASS_TO_PASS=tuple(f"{TEST_MODULE}::{c.test}" for c in cases if c.test not in failing_ids),
        test_cmd=TEST_CMD,
        log_parser=LOG_PARSER,
        env_name="micro",
        split=split,
        snapshot_uri="",
        metadata=json.dumps(meta),
    )


def generate_micro_tasks(n: int, seed: int, split: Split = "train", compound_names: bool = False) -> list[Task]:
    """`n` validated micro tasks, deterministic in `seed` (use distinct seeds per split);
    `compound_names`: functions named by two or three random words, not one of 16."""
    if n < 0:
        raise ValueError(f"n={n}: give a non-negative number of tasks")
    rng = random.Random(seed)
    tasks: list[Task] = []
    attempts = 0
    while len(tasks) < n:
        attempts += 1
        if attempts > 50 * n + 100:
            raise RuntimeError(f"micro generator kept only {len(tasks)} of {n} tasks after {attempts} attempts")
        task = make_micro_task(rng, f"micro-{split}-{seed}-{len(tasks)}", split, compound_names)
        if task is not None:
            tasks.append(task)
    return tasks


def _enc(files: dict[str, str]) -> dict[str, bytes]:
    return {k: v.encode() for k, v in files.items()}
