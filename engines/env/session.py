"""The environment side of one multi-turn agent episode.

`EnvSession.open(task, config)` gives the episode a private copy of the task's base
(a SessionTree: in memory until bash or a cold sandbox needs it on disk);
`step(action_text)` parses one model turn with `engines.protocol` and runs the tool:
view and edit/replace/change on the copy (paths confined to it), bash and test
inside the sandbox. With a `tester` (a grading pool's warm sandboxes,
engines/rollout/step.py), `test` runs the task's tests on the session's changes
there, within the pool's memory bound: for a micro task its plain test functions
are called without pytest (plain_runner.py, same statuses), about 12 ms a call
against 43 ms through pytest and 220 ms in a cold sandbox. Text that does not
parse, a bad path or a failing command become observations, never exceptions.
`patch()` is the diff of the copy against the base, taken here, never from the
model's text.

In-session tests are the ones the agent could see in the repository: for a task
with a `test_patch` (an imported SWE-bench task) its test files run as the base has
them, without the hidden patch, as SWE-bench hides them; the final grade applies the
`test_patch` and runs FAIL_TO_PASS and PASS_TO_PASS (grader.py). Views are pages of
`config.view_lines` lines, and every cut (a page, a long output) is stated in the
observation with what to ask for next.

Methods block (the agent loop calls them through asyncio.to_thread); each session
owns its copy and a lock, so sessions on different threads never interfere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from engines.env.config import EnvConfig
from engines.env.edits import EditError, apply_edit
from engines.env.feedback import all_passed, attempt_observation, edit_echo, test_summary, undo_observation
from engines.env.grader import node_args
from engines.env.report import frame_log, parse_statuses, report_from_log
from engines.env.sandbox.deps import command_deps
from engines.env.sandbox.runner import Runner, make_runner
from engines.env.session_tree import SessionTree
from engines.env.types import GradeResult, StepResult, Task
from engines.env.views import function_view, page
from engines.env.workspace import base_files
from engines.protocol import EDIT_TOOLS, Action, InvalidAction, parse_action


class TestsUnavailable(RuntimeError):
    """The harness could not run the tests (not the model's fault)."""


# Runs a task's tests against an episode's tree as it stands (the pool grades its diff).
Tester = Callable[[Task, SessionTree], GradeResult]


class EnvSession:
    def __init__(self, task: Task, config: EnvConfig, tree: SessionTree, tester: Tester | None = None):
        self.task, self.config, self.tree, self.tester = task, config, tree, tester
        self.done = False
        self.attempts = 0  # edits tested under edit feedback
        self._in_place: list[tuple[str, bytes]] = []  # (path, bytes before) of each edit still in place
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, task: Task, config: EnvConfig, tester: Tester | None = None) -> EnvSession:
        return cls(task, config, SessionTree(base_files(task), Path(config.scratch_dir) / "sessions"), tester)

    def prompt(self) -> str:
        return self.task.problem_statement

    def step(self, action_text: str) -> StepResult:
        with self._lock:
            if self.done:
                return StepResult("the episode is over (submitted)", True)
            action = parse_action(action_text)
            if isinstance(action, InvalidAction):
                return StepResult(self._clip(f"error: {action.message}"), False)
            if action.tool == "submit":
                self.done = True
                return StepResult("submitted", True)
            if action.tool in EDIT_TOOLS:
                return self._edit_step(action)
            return StepResult(self._clip(getattr(self, f"_{action.tool}")(action)), False)

    def patch(self) -> str:
        with self._lock:
            return self.tree.diff()

    def close(self) -> None:
        self.tree.destroy()

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- tools ----------------------------------------------------------------------

    def _view(self, action: Action) -> str:
        lines, error = self._read(action.path)
        if error:
            return error
        page_lines = self.config.view_lines
        if action.scope:
            return function_view(action.path, lines, action.scope, page_lines)
        start = max(1, action.line or 1)
        if start > len(lines):
            return f"error: {action.path} has {len(lines)} lines"
        last = min(len(lines), action.end_line or len(lines))
        return page(action.path, lines, start, last, page_lines)

    def _edit_step(self, action: Action) -> StepResult:
        """An edit; under edit feedback (edit_attempts > 0) an applied edit is an attempt."""
        saved = self._saved(action.path)
        edited = self._edit(action)
        if edited.startswith("error:") or saved is None:  # not applied: no attempt, nothing to undo
            return StepResult(self._clip(edited), False)
        self._in_place.append(saved)
        if self.config.edit_attempts:
            return self._attempt()
        return StepResult(self._clip(edited), False)

    def _undo(self, action: Action) -> str:
        if not self._in_place:
            return "error: no edit to undo"
        path, data = self._in_place.pop()
        self.tree.write_bytes(path, data)
        return undo_observation(path)

    def _edit(self, action: Action) -> str:
        """edit, replace and change (engines/env/edits.py applies each)."""
        lines, error = self._read(action.path)
        if error:
            return error
        edited = apply_edit(action.path, lines, action)
        if isinstance(edited, EditError):
            return f"error: {edited.message}"
        self._write(action.path, edited.lines)
        if action.tool == "replace":
            return f"replaced in {action.path}"
        return edit_echo(action.path, edited.first, edited.new)

    def _bash(self, action: Action) -> str:
        # The model's command sees the dependency folders its task's tests see, no other.
        run = self._sandbox().run(action.body, self.tree.root, deps=command_deps(self.task.test_cmd))
        if not run.started:
            return f"error: {run.infra_message}"
        status = "timed out" if run.timed_out else f"exit {run.exit_code}"
        return f"{run.output.rstrip()}\n({status})".lstrip()

    def _test(self, action: Action) -> str:
        try:
            statuses = self._statuses()
        except TestsUnavailable as err:
            return f"error: {err}"
        return "tests timed out" if statuses is None else test_summary(statuses)

    def _attempt(self) -> StepResult:
        """Edit feedback (engines/env/feedback.py): the edit just made is tested. Under
        rollback a failing edit is undone at once; under keep it stays. The episode ends
        when the grading tests pass in-session (never when they are hidden) or after
        edit_attempts attempts. The tests failing to run at all is the harness's
        failure, raised so the episode is marked, not graded."""
        statuses = self._statuses()
        hidden = bool(self.task.test_patch)
        if statuses is None:  # a timeout is the edit's fault (an endless loop, say)
            statuses = {t: "TIMEOUT" for t in self._visible_ids()}
        self.attempts += 1
        passed = all_passed(statuses)
        keep = self.config.feedback == "keep"
        if not passed and not keep:
            path, data = self._in_place.pop()
            self.tree.write_bytes(path, data)
        self.done = (passed and not hidden) or self.attempts >= self.config.edit_attempts
        text = attempt_observation(statuses, self.attempts, self.config.edit_attempts, kept=keep, hidden=hidden)
        return StepResult(self._clip(text), self.done)

    def _statuses(self) -> dict[str, str] | None:
        """Per-test status of the current tree's visible tests; None when the run timed out.

        With a tester and tests that live in the repository (no test_patch), every
        F2P and P2P test runs on the current diff in the tester's warm sandbox; without
        one, a cold sandbox runs them. A task with a test_patch keeps its grading tests
        hidden: its test files run as the base has them, every test they hold reported.
        """
        if self.task.test_patch:
            return self._visible_statuses()
        if self.tester is not None:
            result = self.tester(self.task, self.tree)
            if result.infra_failure:
                raise TestsUnavailable(result.infra_message)
            return None if "timed out" in result.notes else dict(result.report)
        ids = self._visible_ids()
        run = self._run_tests(node_args(ids))
        if run is None:
            return None
        return report_from_log(frame_log(run.output, run.exit_code), self.task.log_parser, ids, []).statuses

    def _visible_ids(self) -> list[str]:
        return [*self.task.FAIL_TO_PASS, *self.task.PASS_TO_PASS] if not self.task.test_patch else []

    def _visible_statuses(self) -> dict[str, str] | None:
        """Every test of the task's test files that exist in the base tree, as the base has them."""
        files = sorted({t.split("::")[0] for t in (*self.task.FAIL_TO_PASS, *self.task.PASS_TO_PASS)})
        visible = [f for f in files if self.tree.read_bytes(f) is not None]
        if not visible:
            return {}
        run = self._run_tests(visible)
        if run is None:
            return None
        return parse_statuses(frame_log(run.output, run.exit_code), self.task.log_parser)[0]

    def _run_tests(self, args: list[str]):
        run = self._sandbox().run(" ".join([self.task.test_cmd, *args]), self.tree.root)
        if not run.started:
            raise TestsUnavailable(run.infra_message)
        return None if run.timed_out else run

    # ---- helpers --------------------------------------------------------------------

    def _sandbox(self) -> Runner:
        if self._runner is None:
            self._runner = make_runner(self.config)
        return self._runner

    def _saved(self, rel: str | None) -> tuple[str, bytes] | None:
        """A file's path and bytes before an edit, to roll a failing edit back."""
        located = self.tree.locate(rel or "")
        data = None if located is None else self.tree.read_bytes(located)
        return None if data is None else (located, data)

    def _read(self, rel: str | None) -> tuple[list[str], str]:
        located = self.tree.locate(rel or "")
        if located is None:
            return [], f"error: {rel} is outside the repository"
        data = self.tree.read_bytes(located)
        if data is None:
            return [], f"error: no file {rel}"
        try:
            # as a text-mode read gives it: universal newlines
            text = data.decode().replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError:
            return [], f"error: {rel} is not a text file"
        lines = text.split("\n")
        return (lines[:-1] if text.endswith("\n") else lines), ""

    def _write(self, rel: str, lines: list[str]) -> None:
        located = self.tree.locate(rel)
        assert located is not None  # _read checked it
        self.tree.write_bytes(located, ("\n".join(lines) + "\n").encode())

    def _clip(self, text: str) -> str:
        """`text` within config.observation_chars, the cut stated (head and tail kept:
        a test run's verdict is at its end)."""
        limit = self.config.observation_chars
        if len(text) <= limit:
            return text
        note = f"\n[... {{}} characters cut of {len(text)} ...]\n"
        head = (limit - len(note) - 8) * 2 // 3
        tail = limit - len(note) - 8 - head
        return text[:head] + note.format(len(text) - head - tail) + text[-tail:]
