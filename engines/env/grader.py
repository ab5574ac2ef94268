"""Grade a patch against a task: filter, apply, run the task's tests sandboxed, decide.

Steps of one grade (each failure is a graded failure of the model unless marked
infra, which training leaves out of group statistics):
  1. size and format checks (a 50 MB diff or binary junk is refused unread);
  2. the allowlist filter drops test files and test/build configuration (patches.py),
     judged on the paths git reads from the patch;
  3. the repository copy is reset to the task's base, so test files are pristine;
  4. the filtered patch is applied and the paths it changed in the tree are checked
     against the allowlist again (any protected one: not graded); then the task's
     test_patch is applied (a failure here is infra);
  5. only the FAIL_TO_PASS and PASS_TO_PASS tests run, in the sandbox (a warm one
     per copy for pytest commands, warm_pytest.py);
  6. the framed log is parsed and decided with SWE-bench's rules (report.py);
  7. the patch monitor (monitor.py) reads the changed source files as step 4 left
     them against the base: a change that reaches into pytest or the interpreter, or
     adds truth dunders to a class, is flagged (`GradeResult.flags`), and with
     `hack_policy = "zero_reward"` (the default) a flagged patch is graded not
     resolved with reward 0, its note naming the rules. The tests run in the same
     process as the code they judge, so passing them is no proof on its own.
     Unflagged patches are graded exactly as without the monitor;
  8. with `strict_judge` on, a resolved patch of a task whose original code is known
     is judged again on values (judge.py): its functions on the tests' own inputs, in
     a sandboxed process without pytest, against the fixed code's answers (computed
     once per task and copy); a difference grades it not resolved, flag `strict_judge`.
With `fast` (the `test` tool and edit feedback, when `fast_test_runner` is on), a
task whose tests are plain functions runs them in the same warm sandbox without
pytest (plain_runner.py) and is decided by the same rules on the status map that
runner reports; where it cannot decide, pytest runs as above. A final grade is
never fast. A fast grade may come with the patch's files as an episode holds them
in memory (`changes`, base files only): they are written in place of steps 2-4,
which spares three git processes a call; what they cannot vouch for (a new or
protected path) goes the patch's way. Every route is monitored alike, so a fast grade
that pytest decided (cached as a final one) carries the same verdict.
A timeout of the tests is a model failure (the patch made them hang); a sandbox
that cannot start, or a task whose test patch does not apply, is infra.

`GradingPool` grades many in parallel: a worker per core, bounded by memory, each
owning repository copies it reuses (reset between grades). Workers share nothing
writable, so no grade can disturb another.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Literal

from engines.env.config import EnvConfig
from engines.env.errors import EnvError, TaskError
from engines.env.judge import SCRIPT, JudgeSpec, disagreement, judge_command, judge_spec, read_answers
from engines.env.monitor import MonitorReport, scan
from engines.env.patches import filter_patch, is_allowed, protected_files
from engines.env.report import TestReport, frame_log, report_from_log, report_from_statuses
from engines.env.sandbox.plain_runner import PlainRun, runs_plain
from engines.env.sandbox.runner import BwrapRunner, Runner, RunResult, check_caps, make_runner
from engines.env.sandbox.warm_pytest import WarmPytest, pytest_args
from engines.env.types import GradeResult, Task
from engines.env.workspace import Files, Workspace, base_files


def grade(task: Task, patch: str, config: EnvConfig) -> GradeResult:
    """Grade one patch in a fresh repository copy (the pool reuses copies instead)."""
    with GradingPool(config, workers=1) as pool:
        return pool.grade_one(task, patch)


def targeted_command(task: Task) -> str:
    """The task's test command on its F2P and P2P tests, named by `file::function`.

    Parameters are dropped from the ids given to pytest (all parametrizations of a
    test run): an id as a log parser derives it may not be addressable (swebench's
    pytest parser cuts ids at spaces). Statuses of tests outside F2P/P2P are ignored.
    """
    return " ".join([task.test_cmd, *node_args((*task.FAIL_TO_PASS, *task.PASS_TO_PASS))])


def node_args(test_ids: Sequence[str]) -> list[str]:
    """Shell-quoted `file::function` pytest arguments for `test_ids`, in order, without repeats."""
    return [shlex.quote(n) for n in dict.fromkeys(t.split("[", 1)[0] for t in test_ids)]


class _Slot:
    """One worker's private repository copies, one per snapshot (base switched per task),
    each with its warm pytest sandbox once a test ran there."""

    def __init__(self, root: Path):
        self.root = root
        self.copies: dict[str, Workspace] = {}
        self.warm: dict[str, WarmPytest] = {}
        self.warm_judges: dict[str, WarmPytest] = {}  # the strict judge's warm sandboxes, without pytest
        self.judged: dict[tuple[str, str], list | None] = {}  # the fixed code's answers to the strict judge, per task

    def workspace(self, task: Task, python: str) -> Workspace:
        key = _copy_key(task)
        base = base_files(task)
        ws = self.copies.get(key)
        if ws is None:
            if len(self.copies) >= 8:
                self._evict(next(iter(self.copies)))
            ws = self.copies[key] = Workspace(Path(tempfile.mkdtemp(prefix="grade-", dir=self.root)), base)
            ws.keep_bytecode(python)  # compiled once per copy, not once per run
        else:
            ws.base = base
            ws.reset()
        return ws

    def run_tests(self, task: Task, ws: Workspace, config: EnvConfig, runner: Runner) -> RunResult:
        """The task's targeted tests in `ws`: in its warm sandbox when the command is
        `python -m pytest ...` and the runner is bubblewrap, else a cold run."""
        command = targeted_command(task)
        args = pytest_args(command) if config.warm_pytest and isinstance(runner, BwrapRunner) else None
        if args is None:
            return runner.run(command, ws.root)
        return self._warm(task, config, runner, ws).run(args)

    def plain_ready(self, task: Task, changed: Sequence[str], config: EnvConfig) -> bool:
        """Whether the plain runner may test `task` with these paths changed (in a bwrap
        sandbox): it is on, warm sandboxes are, the tests qualify, the diff only edits base files."""
        return (
            config.fast_test_runner
            and config.warm_pytest
            and runs_plain(task)
            and all(p in base_files(task) for p in changed)
        )

    def run_plain(self, task: Task, ws: Workspace, config: EnvConfig, runner: BwrapRunner) -> PlainRun:
        """The task's targeted tests in `ws`'s warm sandbox, called without pytest."""
        warm = self._warm(task, config, runner, ws)
        args = pytest_args(targeted_command(task))
        assert args is not None  # runs_plain: the micro test command
        tests = list(dict.fromkeys((*task.FAIL_TO_PASS, *task.PASS_TO_PASS)))
        return warm.run_plain(args, tests)

    def fixed_answers(self, task: Task, spec: JudgeSpec, config: EnvConfig, runner: Runner) -> list | None:
        """The strict judge's answers on `task`'s fixed code (its gold patch), once per task."""
        key = (task.instance_id, task.base_commit)
        if key not in self.judged:
            if len(self.judged) >= 256:
                self.judged.pop(next(iter(self.judged)))
            self.judged[key] = self.judge(task, spec, task.patch, config, runner)
        return self.judged[key]

    def judge(self, task: Task, spec: JudgeSpec, patch: str, config: EnvConfig, runner: Runner) -> list | None:
        """The judge's answers on the base with `patch` applied; None when it gave none."""
        ws = self.workspace(task, config.python)
        if error := ws.apply(patch):
            raise EnvError(f"a patch that applied for the tests did not apply for the strict judge: {error}")
        nonce = f">>>>> judge {secrets.token_hex(8)} "
        try:
            if config.warm_pytest and isinstance(runner, BwrapRunner) and pytest_args(task.test_cmd) is not None:
                run = self._warm(task, config, runner, ws, judge=True).run_judge(SCRIPT, [nonce, spec.text()])
            else:  # a test command with its own environment (PYTHONPATH): the judge runs cold, under it
                run = runner.run(judge_command(task, spec, nonce), ws.root)
        finally:
            ws.reset()
        if not run.started:
            raise EnvError(run.infra_message)
        return read_answers(run.output, nonce)

    def _warm(self, task: Task, config: EnvConfig, runner: Runner, ws: Workspace, judge: bool = False) -> WarmPytest:
        """The copy's warm sandbox for the tests (or, with `judge`, the strict judge's), started once."""
        sandboxes = self.warm_judges if judge else self.warm
        key = _copy_key(task)
        if key not in sandboxes:
            assert isinstance(runner, BwrapRunner)
            sandboxes[key] = WarmPytest(config, runner, ws.root, judge=judge)
        return sandboxes[key]

    def close(self) -> None:
        for key in list(self.copies):
            self._evict(key)

    def _evict(self, key: str) -> None:
        for warm in (self.warm.pop(key, None), self.warm_judges.pop(key, None)):
            if warm is not None:
                warm.close()
        self.copies.pop(key).destroy()


def _copy_key(task: Task) -> str:
    return task.snapshot_uri or "inline"


class GradingPool:
    """Grades (task, patch) pairs on `workers` threads, each driving sandboxed subprocesses."""

    def __init__(self, config: EnvConfig, workers: int | None = None, runner: Runner | None = None):
        self.config = config
        if config.backend == "bwrap":
            check_caps(config)  # sandboxed grading without memory and process caps only when opted out
        self.runner = runner or make_runner(config)
        self.workers = workers or config.worker_count()
        os.makedirs(config.scratch_dir, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="pool-", dir=config.scratch_dir))
        self._slots: queue.Queue[_Slot] = queue.Queue()
        for i in range(self.workers):
            self._slots.put(_Slot(self._dir / f"w{i}"))
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="grader")

    def grade_many(
        self, items: Sequence[tuple[Task, str]], fast: bool = False, changes: Sequence[Files | None] | None = None
    ) -> list[GradeResult]:
        """Grade every pair; results in input order. Never raises for bad tasks or patches.
        `fast`: test plain-function tests without pytest where they qualify (the `test`
        tool; such a result says runner="plain" and is no final grade). `changes`: per
        item, the files its patch writes ({path: bytes}, as the episode holds them) or None."""
        changes = changes or [None] * len(items)
        return list(
            self._executor.map(lambda item, files: self.grade_one(*item, fast=fast, changes=files), items, changes)
        )

    def grade_one(self, task: Task, patch: str, fast: bool = False, changes: Files | None = None) -> GradeResult:
        slot = self._slots.get()
        start = time.monotonic()
        try:
            slot.root.mkdir(parents=True, exist_ok=True)
            return _grade(task, patch, self.config, self.runner, slot, start, fast, changes)
        except (EnvError, ValueError, OSError) as exc:
            return _result(task, start, infra=f"task {task.instance_id}: {exc}")
        finally:
            self._slots.put(slot)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        while not self._slots.empty():
            self._slots.get().close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _grade(
    task: Task,
    patch: str,
    config: EnvConfig,
    runner: Runner,
    slot: _Slot,
    start: float,
    fast: bool = False,
    changes: Files | None = None,
) -> GradeResult:
    if not isinstance(patch, str):
        return _result(task, start, notes=f"patch must be text, got {type(patch).__name__}", applied=False)
    if len(patch.encode("utf-8", "surrogateescape")) > config.max_patch_bytes:
        return _result(
            task, start, notes=f"patch larger than max_patch_bytes={config.max_patch_bytes}; not applied", applied=False
        )
    if fast and changes is not None:
        early = _plain_grade(task, changes, config, runner, slot, start)
        if early is not None:
            return early
    filtered = filter_patch(patch, protected_files(task))
    if filtered.error:
        return _result(task, start, notes=filtered.error, applied=False)
    dropped = f"dropped files outside the allowlist: {', '.join(filtered.dropped)}" if filtered.dropped else ""
    ws = slot.workspace(task, config.python)
    error = ws.apply(filtered.text)
    if error:
        return _result(task, start, notes=f"patch does not apply: {error}", applied=False)
    # What the applied patch really touched, read from the tree: the last word on the allowlist.
    changed = ws.changed_paths()
    if refused := [p for p in changed if not is_allowed(p, protected_files(task)) or (ws.root / p).is_symlink()]:
        ws.reset()
        return _result(
            task, start, notes=f"patch touched protected paths: {', '.join(refused[:10])}; not graded", applied=False
        )
    sources = [p for p in changed if p.endswith((".py", ".pyw")) and (ws.root / p).is_file()]
    monitor = _monitor(task, ws.base, {p: (ws.root / p).read_bytes() for p in sources})
    if task.test_patch and (error := ws.apply(task.test_patch)):
        raise TaskError(f"test_patch does not apply on the base ({error}); fix the task")
    if fast and isinstance(runner, BwrapRunner) and slot.plain_ready(task, changed, config):
        if (decided := _run_plain(task, ws, config, runner, slot, dropped, start)) is not None:
            return _flagged(decided, monitor, config)
        # The plain runner left the decision to pytest: the same tree again, from the base.
        if error := ws.apply(filtered.text):
            raise EnvError(f"the patch applied once but not again after the plain run: {error}")
    run = slot.run_tests(task, ws, config, runner)
    ws.reset()  # leave nothing behind for the next grade on this copy
    rep = None
    if run.started and not run.timed_out:
        rep = report_from_log(
            frame_log(run.output, run.exit_code), task.log_parser, task.FAIL_TO_PASS, task.PASS_TO_PASS
        )
    decided = _flagged(_decided(task, run, rep, dropped, config, start, "pytest"), monitor, config)
    return _judged(task, filtered.text, decided, config, runner, slot, start)


def _plain_grade(
    task: Task, changes: Files, config: EnvConfig, runner: Runner, slot: _Slot, start: float
) -> GradeResult | None:
    """A fast grade of the base with `changes` (the files the patch writes) over it,
    without git: for base files the allowlist admits, when the plain runner can decide.
    None: grade the patch."""
    protected = protected_files(task)
    if not (
        isinstance(runner, BwrapRunner)
        and slot.plain_ready(task, list(changes), config)
        and all(is_allowed(p, protected) for p in changes)
    ):
        return None
    ws = slot.workspace(task, config.python)
    ws.write(changes)
    decided = _run_plain(task, ws, config, runner, slot, "", start)
    return None if decided is None else _flagged(decided, _monitor(task, ws.base, changes), config)


def _run_plain(
    task: Task, ws: Workspace, config: EnvConfig, runner: BwrapRunner, slot: _Slot, dropped: str, start: float
) -> GradeResult | None:
    """The plain runner's grade of `ws` as it stands, which it then resets; None when
    that runner left the decision to pytest."""
    plain = slot.run_plain(task, ws, config, runner)
    ws.reset()  # leave nothing behind: for the next grade, or for pytest
    if plain.status is None and not plain.run.timed_out and plain.run.started:
        return None
    rep = None
    if plain.status is not None:
        rep = report_from_statuses(plain.status, plain.exit_code, task.FAIL_TO_PASS, task.PASS_TO_PASS)
    return _decided(task, plain.run, rep, dropped, config, start, "plain")


def _decided(
    task: Task,
    run: RunResult,
    rep: TestReport | None,
    dropped: str,
    config: EnvConfig,
    start: float,
    runner: Literal["pytest", "plain"],
) -> GradeResult:
    """The grade of a finished run (`rep`: its decision; None when it did not finish)."""
    if not run.started:
        return _result(task, start, infra=run.infra_message, runner=runner)
    if run.timed_out or rep is None:
        return _result(
            task,
            start,
            notes=f"tests timed out after {config.limits.wall_timeout_s}s; {dropped}".strip("; "),
            runner=runner,
        )
    reward = 1.0 if rep.resolved else 0.0
    if config.partial_credit and not rep.resolved and rep.log_valid and rep.p2p_passed == rep.p2p_total:
        reward = rep.f2p_passed / max(1, rep.f2p_total)
    notes = "; ".join(
        n for n in (dropped, "out of memory" if run.oom else "", "" if rep.log_valid else "test log rejected") if n
    )
    return GradeResult(
        rep.resolved,
        reward,
        rep.f2p_passed,
        rep.f2p_total,
        rep.p2p_passed,
        rep.p2p_total,
        rep.statuses,
        False,
        "",
        time.monotonic() - start,
        True,
        notes,
        runner,
    )


def _monitor(task: Task, base: Files, patched: Files) -> MonitorReport:
    """The patch monitor on the files a patch left (`patched`: changed paths only)."""
    return scan({p: base[p] for p in patched if p in base}, patched, protected_files(task))


def _flagged(result: GradeResult, monitor: MonitorReport, config: EnvConfig) -> GradeResult:
    """`result` with the monitor's flags and `config.hack_policy` applied; unchanged
    when nothing was flagged."""
    if not monitor.flags:
        return result
    zero = config.hack_policy == "zero_reward"
    verdict = "graded not resolved (hack_policy=zero_reward)" if zero else "recorded (hack_policy=record)"
    note = f"patch monitor flagged {monitor.summary()}; {verdict}"
    return replace(
        result,
        resolved=result.resolved and not zero,
        reward=0.0 if zero else result.reward,
        notes="; ".join(n for n in (result.notes, note) if n),
        flags=monitor.rules,
    )


def _judged(
    task: Task, patch: str, result: GradeResult, config: EnvConfig, runner: Runner, slot: _Slot, start: float
) -> GradeResult:
    """`result` after the strict judge (step 8), its time counted in `grading_s`;
    unchanged when the judge does not apply."""
    if not (config.strict_judge and result.resolved) or (spec := judge_spec(task)) is None:
        return result
    expected = slot.fixed_answers(task, spec, config, runner)
    # None: the original itself gives no answer, so the tests stay the only judge.
    why = None if expected is None else disagreement(spec, expected, slot.judge(task, spec, patch, config, runner))
    if why is None:
        return replace(result, grading_s=time.monotonic() - start)
    return replace(
        result,
        resolved=False,
        reward=0.0,
        grading_s=time.monotonic() - start,
        notes="; ".join(n for n in (result.notes, f"strict_judge: {why}; graded not resolved") if n),
        flags=(*result.flags, "strict_judge"),
    )


def _result(
    task: Task,
    start: float,
    notes: str = "",
    infra: str = "",
    applied: bool = True,
    runner: Literal["pytest", "plain"] = "pytest",
) -> GradeResult:
    return GradeResult.failed(task, infra, notes, applied, time.monotonic() - start, runner)


def report_json(result: GradeResult) -> str:
    """The `test_report` column of the rollouts table."""
    return json.dumps(result.report, sort_keys=True)
