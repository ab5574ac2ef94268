"""Which tasks' tests the warm sandbox may run without pytest, and reading that run's answer.

A micro task's tests are plain `def test_*(): assert ...` functions, and a `test`
call spends most of its 0.1 s in pytest's start-up and collection. For such tasks
the warm sandbox can instead import the test file and call the functions directly
(`pytest_server._plain`), reporting the status map pytest's log would have given.
This is for the `test` tool and edit feedback only: a final grade always runs
pytest and is read by the SWE-bench log parser.

A task qualifies (`runs_plain`) only when nothing pytest does besides calling the
functions can change an outcome: the micro test command (known options), no
test_patch, test files at the root holding only imports and argument-less,
undecorated `test_*` functions, no pytest configuration or package in the tree.
A diff that adds files (one could shadow a module pytest imports) runs pytest.
Within a run, anything the plain runner cannot vouch for goes to pytest as well:
output of the tests, an import of pytest, an exception of a non-builtin type, a
KeyboardInterrupt, a child that died without answering (tests/engines/env/
test_fast_runner.py checks the agreement on thousands of edited tasks).

What stays different: pytest's frames sit under each test (a recursion within a
few dozen frames of the limit can pass here and fail there) and its start-up
takes CPU time (a test within a fraction of a second of the CPU limit). The
answer line is written by code the tests share a process with, so it is no
security boundary; that is why a final grade never comes from this runner.
"""

from __future__ import annotations

import ast
import functools
import json
import keyword
from dataclasses import dataclass

from engines.env.parse import parse_module
from engines.env.sandbox.runner import RunResult
from engines.env.types import Task
from engines.env.workspace import base_files

# The pytest command of files of plain `def test_*` functions (every micro task's).
# Plain-assert tests need none of pytest's doctest, junitxml, unittest, pdb, tmpdir or
# step-wise plugins; leaving them unregistered makes each graded run about 20% faster.
_UNUSED_PLUGINS = (
    "doctest",
    "junitxml",
    "pastebin",
    "legacypath",
    "tmpdir",
    "stepwise",
    "setuponly",
    "setupplan",
    "subtests",
    "unittest",
    "debugging",
)
PLAIN_TEST_CMD = " ".join(
    ["python -m pytest -rA -q -p no:cacheprovider", *(f"-p no:{p}" for p in _UNUSED_PLUGINS), "-o addopts= --tb=line"]
)

PLAIN_RESULT = ">>>>> plain runner result"  # as pytest_server.PLAIN_RESULT (that file imports nothing of ours)
_STATUSES = {"PASSED", "FAILED", "ERROR"}
# Files that change how pytest collects or runs (configuration, conftest, packages).
_PYTEST_FILES = {"conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "__init__.py"}
# Names pytest treats specially in a test module (as pytest_server._PYTEST_NAMES).
_SPECIAL = {
    "__test__",
    "pytestmark",
    "pytest_plugins",
    "setup_module",
    "teardown_module",
    "setUpModule",
    "tearDownModule",
    "setup_function",
    "teardown_function",
    "setup",
    "teardown",
}


@dataclass(frozen=True)
class PlainRun:
    run: RunResult  # the sandbox run: started, timed out, oom as for a pytest run
    status: dict[str, str] | None  # the status map pytest's log would give; None: run pytest instead
    exit_code: int | None  # the exit code pytest would have had


@functools.lru_cache(maxsize=4096)
def runs_plain(task: Task) -> bool:
    """True when the plain runner gives the statuses pytest gives for `task`'s tests."""
    if task.test_cmd != PLAIN_TEST_CMD or task.test_patch:
        return False
    tests: dict[str, list[str]] = {}
    for test_id in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS):
        path, sep, name = test_id.partition("::")
        if not sep or "/" in path or not path.endswith(".py") or not path[:-3].isidentifier() or "::" in name:
            return False
        tests.setdefault(path, []).append(name)
    files = base_files(task)
    if any(rel.rsplit("/", 1)[-1] in _PYTEST_FILES for rel in files):
        return False
    return all(path in files and _plain_file(files[path], names) for path, names in tests.items())


def _plain_file(source: bytes, names: list[str]) -> bool:
    """The file holds only imports and plain test functions, each name in `names` defined once."""
    try:
        tree = parse_module(source)
    except (SyntaxError, ValueError):
        return False
    defined: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if not _plain_import(stmt):
                return False
        elif isinstance(stmt, ast.FunctionDef) and _plain_test(stmt):
            defined.append(stmt.name)
        else:
            return False
    return len(defined) == len(set(defined)) and all(
        n.isidentifier() and not keyword.iskeyword(n) and n in defined for n in names
    )


def _plain_import(stmt: ast.Import | ast.ImportFrom) -> bool:
    """An absolute import, of nothing pytest-related, binding no name pytest would collect or call."""
    if isinstance(stmt, ast.ImportFrom):
        if stmt.level:
            return False
        modules = [stmt.module or ""]
    else:
        modules = [a.name for a in stmt.names]
    if any(m.split(".")[0] in ("pytest", "_pytest", "unittest") for m in modules):
        return False
    bound = [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return all(b != "*" and not b.startswith("test") and b not in _SPECIAL for b in bound)


def _plain_test(fn: ast.FunctionDef) -> bool:
    args = fn.args
    return (
        fn.name.startswith("test")
        and not fn.decorator_list
        and not (args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)
        and not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(fn))
    )


def read_answer(output: str, nonce: str) -> tuple[dict[str, str], int] | None:
    """The plain runner's status map and exit code, or None when the child wrote anything
    else, wrote no answer, or left the decision to pytest."""
    prefix = f"{PLAIN_RESULT} {nonce} "
    if not output.startswith(prefix) or not output.endswith("\n") or output.count("\n") != 1:
        return None
    try:
        body = json.loads(output[len(prefix) :])
    except ValueError:
        return None
    status, code = (body.get("status"), body.get("exit_code")) if isinstance(body, dict) else (None, None)
    if not isinstance(status, dict) or not isinstance(code, int) or isinstance(code, bool):
        return None
    if not all(isinstance(k, str) and v in _STATUSES for k, v in status.items()):
        return None
    return status, code
