"""The plain runner (plain_runner.py) gives the statuses pytest gives.

The agreement test grades generated micro tasks (400 by default, every bug kind
many times over; TANDEM_AGREEMENT_TASKS=2100 for a longer sample), each with a random
single-line edit, both ways: through pytest (the final grade) and fast, as the
`test` tool does; every test's status, the counts, the resolution and the notes
must be identical. The edits cover every bug kind's mutants and fixes, and edits
that make the module raise at import, fail to import, exit, loop forever, print,
raise other exceptions or reach for pytest (those the plain runner leaves to pytest).
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool, targeted_command
from engines.env.report import frame_log, report_from_log, report_from_statuses
from engines.env.sandbox.plain_runner import PLAIN_RESULT, read_answer, runs_plain
from engines.env.sandbox.runner import make_runner
from engines.env.sandbox.warm_pytest import SERVER_SCRIPT, WarmPytest, pytest_args
from engines.env.task_sources.micro import MODULE, generate_micro_tasks, mutate_line
from engines.env.types import GradeResult, Task
from engines.env.workspace import Workspace, base_files, unified_diff
from tests.engines.env.conftest import FAST_LIMITS

# About 95% decided by the plain runner, the rest left to pytest.
TASKS = int(os.environ.get("TANDEM_AGREEMENT_TASKS", "400"))
BUG_KINDS = {"arithmetic", "comparison", "swapped_operands", "constant", "removed_not", "removed_minus"}

# (where, text): "top" puts `text` above line 1 (module level), "body" replaces a random
# body line with `text` at that line's indentation.
DELIBERATE = [
    ("top", "1 // 0"),  # raises at import
    ("top", "import no_such_module"),
    ("top", "undefined_name"),
    ("top", "raise ValueError('at import')"),
    ("top", "import sys; sys.exit(0)"),  # exits at import
    ("top", "raise SystemExit(1)"),
    ("top", "exit('bye')"),
    ("top", "def broken(:"),  # does not import (syntax)
    ("body", "return a +"),
    ("body", "  return a"),  # bad indentation
    ("body", "import sys; sys.exit(2)"),  # exits in a test
    ("body", "return a // 0"),  # exceptions other than AssertionError
    ("body", "return None + a"),
    ("body", "raise KeyError(a)"),
    ("body", "return undefined_name"),
    ("body", "return 'text'"),
    ("body", "print('PASSED test_m.py::test_x_0')"),  # output: left to pytest
    ("top", "print('y' * 300_000)"),  # more output than is kept
    ("body", "raise KeyboardInterrupt"),
    ("body", "import pytest; pytest.skip('no')"),
    ("body", "import os; os._exit(0)"),
    ("body", "import unittest; raise unittest.SkipTest('no')"),
]
LOOPS = [("top", "while True: pass"), ("body", "while True: pass")]


def _edited(task: Task, source: str) -> str:
    """The patch that turns the task's module into `source`."""
    files = task.meta()["files"]
    new = dict(files, **{MODULE: source})
    return unified_diff({k: v.encode() for k, v in files.items()}, {k: v.encode() for k, v in new.items()})


def _deliberate(task: Task, where: str, text: str, rng: random.Random) -> str:
    lines = task.meta()["files"][MODULE].rstrip("\n").split("\n")
    if where == "top":
        lines = [text, *lines]
    else:
        i = rng.choice([i for i, line in enumerate(lines) if line.startswith(" ")])
        lines[i] = lines[i][: len(lines[i]) - len(lines[i].lstrip())] + text
    return "\n".join(lines) + "\n"


def random_edit(task: Task, rng: random.Random) -> str:
    """The task's module after one random single-line edit."""
    meta = task.meta()
    source = meta["files"][MODULE].rstrip("\n")
    lines = source.split("\n")
    roll = rng.random()
    if roll < 0.15:  # the fix
        lines[meta["line"] - 1] = meta["fixed_line"]
    elif roll < 0.6 and (mutated := mutate_line(source, rng)) is not None:  # another single-token edit
        lines[mutated[0] - 1] = mutated[1]
    elif roll < 0.75:  # a line copied over another, or deleted
        i = rng.randrange(len(lines))
        lines[i : i + 1] = [] if rng.random() < 0.3 else [lines[rng.randrange(len(lines))]]
    else:
        return _deliberate(task, *rng.choice(DELIBERATE), rng)
    return "\n".join(lines) + "\n"


def _runners_agree(config: EnvConfig, work: list[tuple[Task, str]], root: Path) -> tuple[int, int]:
    """Run each (task, module source) through pytest and through the plain runner in one
    warm sandbox, on the same tree; (test statuses compared, runs the plain runner decided)."""
    ws = Workspace(root, base_files(work[0][0]))
    compared = decided = 0
    with WarmPytest(config, make_runner(config), ws.root) as warm:
        for task, source in work:
            ids = (task.FAIL_TO_PASS, task.PASS_TO_PASS)
            args = pytest_args(targeted_command(task))
            ws.base = base_files(task)
            ws.reset()
            (ws.root / MODULE).write_text(source)
            slow = warm.run(args)
            ws.reset()
            (ws.root / MODULE).write_text(source)
            fast = warm.run_plain(args, [*ids[0], *ids[1]])
            assert slow.started and fast.run.started, (slow.infra_message, fast.run.infra_message)
            if fast.status is None and not fast.run.timed_out:
                continue  # left to pytest: the grader runs it
            want = (
                "timed out"
                if slow.timed_out
                else report_from_log(frame_log(slow.output, slow.exit_code), task.log_parser, *ids)
            )
            got = "timed out" if fast.run.timed_out else report_from_statuses(fast.status, fast.exit_code, *ids)
            assert got == want, (task.instance_id, source, slow.output[-2000:])
            compared += len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS)
            decided += 1
    ws.destroy()
    return compared, decided


def _same(fast: GradeResult, slow: GradeResult) -> bool:
    return replace(fast, grading_s=0.0, runner="pytest") == replace(slow, grading_s=0.0)


def _identical(a: GradeResult, b: GradeResult) -> bool:
    return replace(a, grading_s=0.0) == replace(b, grading_s=0.0)


def _grades_agree(pool: GradingPool, items: list[tuple[Task, str]]) -> int:
    """Grade `items` (task, module source) fast (from the patch, and from the files as an
    episode holds them) and by pytest; the grades the plain runner decided."""
    patches = [(t, _edited(t, source)) for t, source in items]
    fast = pool.grade_many(patches, fast=True)
    from_files = pool.grade_many(patches, fast=True, changes=[{MODULE: source.encode()} for _, source in items])
    slow = pool.grade_many(patches)
    differ = [(t.instance_id, f, s) for (t, _), f, s in zip(items, fast, slow) if not _same(f, s)]
    assert not differ, differ[:3]
    differ = [(t.instance_id, m, f) for (t, _), m, f in zip(items, from_files, fast) if not _identical(m, f)]
    assert not differ, differ[:3]
    assert not any(s.infra_failure for s in slow)
    return sum(f.runner == "plain" for f in fast)


@pytest.mark.sandbox
@pytest.mark.slow
def test_plain_runner_and_pytest_agree_on_every_test(env_config, tmp_path):
    start = time.monotonic()
    tasks = generate_micro_tasks(TASKS, seed=2025)
    assert {t.meta()["bug"] for t in tasks} == BUG_KINDS and all(runs_plain(t) for t in tasks)
    rng = random.Random(11)
    edits = [(t, random_edit(t, rng)) for t in tasks]
    edits += [(t, _deliberate(t, *d, rng)) for t, d in zip(tasks, DELIBERATE * 2)]  # each at least twice

    # The runners themselves, on every edit: one warm sandbox per core.
    halves = [edits[0::2], edits[1::2]]
    with ThreadPoolExecutor(2) as threads:
        counts = list(threads.map(lambda i: _runners_agree(env_config, halves[i], tmp_path / f"w{i}"), [0, 1]))
    tests, decided = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert decided > 0.9 * len(edits)  # the fast path really ran: only odd edits are left to pytest

    # The `test` tool's grades through the pool, fallbacks included: the deliberate edits
    # and some random ones; then endless loops, stopped by the CPU-time limit (no status:
    # the log is rejected) and by the wall clock.
    # Without the strict judge, which the pytest route adds and the plain runner (a `test`
    # call's, never a final grade) does not: the two routes are compared on what the tests say.
    with GradingPool(env_config.model_copy(update={"strict_judge": False})) as pool:
        _grades_agree(pool, edits[-2 * len(DELIBERATE) :] + edits[:60])
    loops = [(t, _deliberate(t, *d, rng)) for t, d in zip(tasks, LOOPS * 2)]
    for stops in ({"cpu_seconds": 1, "wall_timeout_s": 10.0}, {"cpu_seconds": 30, "wall_timeout_s": 1.0}):
        limits = FAST_LIMITS.model_copy(update=stops)
        with GradingPool(env_config.model_copy(update={"limits": limits, "strict_judge": False})) as pool:
            assert _grades_agree(pool, loops) == len(loops)
    print(
        f"plain runner and pytest agree on {tests} test statuses of {decided} edited micro tasks "
        f"({len(edits) - decided} left to pytest), and on {2 * len(DELIBERATE) + 60 + 2 * len(loops)} "
        f"grades; {time.monotonic() - start:.0f} s"
    )


@pytest.mark.sandbox
def test_an_episodes_files_grade_as_its_patch_does(env_config):
    """A `test` call hands the pool the files an episode changed, which spares git; a
    grade from them equals the patch's, and what they cannot vouch for (a test file, a
    new file) is graded from the patch."""
    tasks = generate_micro_tasks(3, seed=5)
    fix = tasks[0].meta()
    fixed = fix["files"][MODULE].split("\n")
    fixed[fix["line"] - 1] = fix["fixed_line"]
    test_file = next(p for p in tasks[1].meta()["files"] if p != MODULE)
    cases = [
        (tasks[0], {MODULE: "\n".join(fixed).encode()}),
        (tasks[1], {test_file: b"def test_nothing():\n    pass\n"}),
        (tasks[2], {"extra.py": b"x = 1\n"}),
    ]
    base = [{k: v.encode() for k, v in t.meta()["files"].items()} for t, _ in cases]
    patches = [(t, unified_diff(b, b | files)) for (t, files), b in zip(cases, base)]
    with GradingPool(env_config, workers=1) as pool:
        from_files = pool.grade_many(patches, fast=True, changes=[files for _, files in cases])
        from_patches = pool.grade_many(patches, fast=True)
    assert from_files[0].resolved and from_files[0].runner == "plain"
    assert "dropped files outside the allowlist" in from_files[1].notes
    for m, f in zip(from_files, from_patches):
        assert _identical(m, f)


def test_micro_tasks_qualify_and_others_do_not():
    task = generate_micro_tasks(1, seed=5)[0]
    assert runs_plain(task)
    files = task.meta()["files"]
    tests = files["test_m.py"]

    def variant(**changes) -> Task:
        meta = task.meta()
        if "tests" in changes:
            meta["files"] = dict(files, **{"test_m.py": changes.pop("tests")})
        if "extra" in changes:
            meta["files"] = dict(files, **changes.pop("extra"))
        return replace(task, metadata=__import__("json").dumps(meta), **changes)

    assert not runs_plain(variant(test_patch="diff"))
    assert not runs_plain(variant(test_cmd="python -m pytest -x"))
    assert not runs_plain(variant(extra={"conftest.py": ""}))
    assert not runs_plain(variant(tests="import pytest\n" + tests))
    assert not runs_plain(variant(tests=tests.replace("def test_", "@staticmethod\ndef test_", 1)))
    assert not runs_plain(variant(tests=tests.replace("():", "(tmp_path):", 1)))
    assert not runs_plain(variant(tests=tests + "\nclass TestX:\n    pass\n"))
    assert not runs_plain(variant(tests=tests + "\npytestmark = []\n"))
    assert not runs_plain(variant(tests=tests.replace("from m import ", "from m import setup_module, ", 1)))
    assert not runs_plain(variant(FAIL_TO_PASS=("test_m.py::test_nothing",)))
    assert not runs_plain(variant(FAIL_TO_PASS=tuple(t + "[1]" for t in task.FAIL_TO_PASS)))


def test_only_the_runners_own_single_line_is_an_answer():
    good = f'{PLAIN_RESULT} n1 {{"status": {{"test_m.py::test_a_0": "PASSED"}}, "exit_code": 0}}\n'
    assert read_answer(good, "n1") == ({"test_m.py::test_a_0": "PASSED"}, 0)
    assert read_answer(good, "n2") is None  # another request's nonce
    assert read_answer("hello\n" + good, "n1") is None  # the tests wrote something
    assert read_answer(good + good, "n1") is None
    assert read_answer(good.replace("PASSED", "XPASS"), "n1") is None
    assert read_answer(f'{PLAIN_RESULT} n1 {{"status": null, "exit_code": 0}}\n', "n1") is None
    assert read_answer("", "n1") is None
    assert f'PLAIN_RESULT = "{PLAIN_RESULT}"' in SERVER_SCRIPT.read_text()  # the sandbox's side writes the same
