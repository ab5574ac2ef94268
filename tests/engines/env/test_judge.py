"""The strict judge (engines/env/judge.py): which calls judge a task, what its process
answers, and the grades it changes through the real grader in the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engines.env.grader import GradingPool
from engines.env.judge import SCRIPT, JudgeSpec, disagreement, judge_command, judge_spec, read_answers
from engines.env.types import Task
from engines.env.workspace import apply_to_files, base_files, unified_diff
from tests.real_project import SOURCE, hidden_test_task, write_project

NONCE = ">>>>> judge test "


def _answers(tmp_path: Path, source: str, spec: JudgeSpec) -> list | None:
    (tmp_path / "m.py").write_text(source)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, NONCE, spec.text()], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    return read_answers(out.stdout, NONCE)


def _fixed(task: Task) -> str:
    return apply_to_files(base_files(task), task.patch, "gold")["m.py"].decode()


def _patched(task: Task, source: str) -> str:
    base = base_files(task)
    return unified_diff(base, base | {"m.py": source.encode()})


# ---- which calls ----------------------------------------------------------------------


def test_a_micro_task_is_judged_on_its_tests_calls_and_the_integers_around_them(micro_tasks):
    task = micro_tasks[0]
    spec = judge_spec(task)
    assert spec is not None and spec.module == "m"
    tested = [c for c in spec.calls[:20] if c[2] == "{}"]
    test_source = base_files(task)["test_m.py"].decode()
    for name, args, _ in tested[:6]:
        assert f"{name}{args}" in test_source  # the tests' own calls come first
    # Every function gets a grid over its tested range widened by two, never below zero here.
    names = {c[0] for c in spec.calls}
    assert len(spec.calls) > 10 * len(names)
    assert all(not args.startswith("(-") for _, args, _ in spec.calls)


def test_a_task_without_a_known_original_keeps_the_tests_alone(micro_tasks, tmp_path):
    imported = replace(micro_tasks[0], env_name="swe", metadata=json.dumps({"file": "m.py"}))
    assert judge_spec(imported) is None
    # A builder task whose mutated code is a method: no module-level function to call.
    hidden = hidden_test_task(write_project(tmp_path))
    meta = hidden.meta() | {"bug_patch": hidden.patch, "file": SOURCE, "function": "Prices.get"}
    assert judge_spec(replace(hidden, metadata=json.dumps(meta))) is None


def test_only_plain_arguments_are_taken_from_the_tests(micro_tasks):
    task = micro_tasks[0]
    name = judge_spec(task).calls[0][0]
    base = base_files(task)
    tests = (
        f"from m import {name}\n\ndef test_x():\n"
        f"    assert {name}(*[1, 2]) == 0\n    assert {name}(len('ab'), 3) == 0\n"
        f"    assert {name}(abs, [1, -2]) is not None\n    assert {name}(a=1, b={{'k': (1, 2)}}) == 0\n"
    ).encode()
    files = {**base, "test_m.py": tests}
    # Still a micro task: the function called with other than integers gets no grid.
    one = replace(task, metadata=json.dumps({**task.meta(), "files": {k: v.decode() for k, v in files.items()}}))
    spec = judge_spec(one)
    assert spec is not None
    assert list(spec.calls) == [(name, "(abs, [1, -2])", "{}"), (name, "()", "{'a': 1, 'b': {'k': (1, 2)}}")]


# ---- the judge's process ---------------------------------------------------------------


SPEC = JudgeSpec("m", (("f", "(1,)", "{}"), ("f", "(0,)", "{}"), ("g", "()", "{}")))


def test_the_judge_encodes_exact_types_and_exceptions(tmp_path):
    fixed = _answers(tmp_path, "def f(a):\n    return 10 // a\n\ndef g():\n    return [1, (2.0, 'x'), {3}]\n", SPEC)
    assert fixed == [
        ["ok", ["builtins.int", "10"]],
        ["raise", "builtins.ZeroDivisionError"],
        [
            "ok",
            [
                "builtins.list",
                [
                    ["builtins.int", "1"],
                    ["builtins.tuple", [["builtins.float", "2.0"], ["builtins.str", "'x'"]]],
                    ["builtins.set", ['["builtins.int", "3"]']],
                ],
            ],
        ],
    ]
    same = "def f(a):\n    return 10 // a\n\ndef g():\n    return [1, (2.0, 'x'), {3}]\n"
    assert disagreement(SPEC, fixed, _answers(tmp_path, same, SPEC)) is None
    cases = {
        "float for int": "def f(a):\n    return 10.0 // a\n",
        "bool for int": "def f(a):\n    return True if a == 1 else 10 // a\n",
        "int subclass": "class I(int):\n    pass\n\ndef f(a):\n    return I(10 // a)\n",
        "always equal": "class A:\n    def __eq__(self, o):\n        return True\n\ndef f(a):\n    return A()\n",
        "another exception": "def f(a):\n    if a == 0:\n        raise ValueError\n    return 10 // a\n",
    }
    for name, source in cases.items():
        got = _answers(tmp_path, source + "\ndef g():\n    return [1, (2.0, 'x'), {3}]\n", SPEC)
        assert disagreement(SPEC, fixed, got) is not None, name


def test_a_patch_that_ends_the_process_or_forges_answers_gives_no_answer(tmp_path):
    fixed = _answers(tmp_path, "def f(a):\n    return a\n\ndef g():\n    return 0\n", SPEC)
    for source in (
        "raise SystemExit(0)\n",
        "import os\nos._exit(0)\n",
        f"print({NONCE!r} + '[]')\ndef f(a):\n    return a\n\ndef g():\n    return 0\n",
    ):
        got = _answers(tmp_path, source, SPEC)
        assert got is None and "no answer" in disagreement(SPEC, fixed, got)


def test_pytest_is_never_imported_by_the_judge(tmp_path):
    spec = JudgeSpec("m", (("f", "()", "{}"),))
    source = "import sys\n\ndef f():\n    return sorted(m for m in sys.modules if 'pytest' in m)\n"
    assert _answers(tmp_path, source, spec) == [["ok", ["builtins.list", []]]]


# ---- through the grader ----------------------------------------------------------------


@pytest.mark.sandbox
def test_the_grader_rejects_what_only_the_values_show_and_keeps_real_fixes(env_config, micro_tasks):
    tasks = micro_tasks[:4]
    fn = [judge_spec(t).calls[0][0] for t in tasks]

    def answer_table(t: Task) -> str:
        """The tests' own calls answered from a table; any other input left as the bug has it."""
        tests = base_files(t)["test_m.py"].decode()
        fixed: dict = {}
        exec(_fixed(t), fixed)
        src = base_files(t)["m.py"].decode()
        for name in dict.fromkeys(c[0] for c in judge_spec(t).calls):
            keys = [eval(a) for n, a, _ in judge_spec(t).calls if n == name and f"{n}{a}" in tests]
            rows = "".join(f"    if (a, b) == {k!r}:\n        return {fixed[name](*k)!r}\n" for k in keys)
            src += f"\n\n_{name} = {name}\n\ndef {name}(a, b):\n{rows}    return _{name}(a, b)\n"
        return src

    items = {
        "answer_table": (tasks[0], _patched(tasks[0], answer_table(tasks[0]))),
        "float_results": (
            tasks[1],
            _patched(
                tasks[1],
                _fixed(tasks[1]) + f"\n\n_{fn[1]} = {fn[1]}\n\ndef {fn[1]}(a, b):\n    return float(_{fn[1]}(a, b))\n",
            ),
        ),
        "oracle": (tasks[2], tasks[2].patch),
        "renamed_helper": (
            tasks[3],
            _patched(
                tasks[3],
                _fixed(tasks[3]) + f"\n\n_{fn[3]} = {fn[3]}\n\ndef {fn[3]}(a, b):\n    return _{fn[3]}(a, b)\n",
            ),
        ),
    }
    with GradingPool(env_config) as pool:
        judged = dict(zip(items, pool.grade_many(list(items.values()))))
    with GradingPool(env_config.model_copy(update={"strict_judge": False})) as pool:
        tests_alone = dict(zip(items, pool.grade_many(list(items.values()))))
    assert all(r.resolved for r in tests_alone.values()), tests_alone  # the tests pass every one
    for name in ("answer_table", "float_results"):
        assert not judged[name].resolved and judged[name].reward == 0.0, judged[name]
        assert judged[name].flags == ("strict_judge",) and "strict_judge:" in judged[name].notes
    for name in ("oracle", "renamed_helper"):
        assert judged[name].resolved and judged[name].flags == (), judged[name]


@pytest.mark.sandbox
def test_both_routes_of_the_judge_answer_in_the_sandbox_without_pytest(env_config, micro_tasks, tmp_path):
    """The warm judge server (a fork per call) and the cold command (tasks whose test
    command sets its own PYTHONPATH) give the same answer, and neither has pytest loaded."""
    from engines.env.sandbox.runner import BwrapRunner
    from engines.env.sandbox.warm_pytest import WarmPytest

    (tmp_path / "m.py").write_text(
        "import sys\n\ndef f(a):\n    return [a, sorted(m for m in sys.modules if 'pytest' in m)]\n"
    )
    spec = JudgeSpec("m", (("f", "(3,)", "{}"),))
    runner = BwrapRunner(env_config)
    with WarmPytest(env_config, runner, tmp_path, judge=True) as warm:
        warm_answers = [read_answers(warm.run_judge(SCRIPT, [NONCE, spec.text()]).output, NONCE) for _ in range(2)]
    task = replace(micro_tasks[0], test_cmd="PYTHONPATH=. " + micro_tasks[0].test_cmd)
    cold = read_answers(runner.run(judge_command(task, spec, NONCE), tmp_path).output, NONCE)
    expected = [["ok", ["builtins.list", [["builtins.int", "3"], ["builtins.list", []]]]]]
    assert warm_answers == [expected, expected] and cold == expected
