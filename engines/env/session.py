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

Methods block (the agent loop calls them through asyncio.to_thread); each session
owns its copy and a lock, so sessions on different threads never interfere.
Observations are short (config.observation_chars) for tiny context windows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from engines.env.config import EnvConfig
from engines.env.edits import EditError, apply_edit, function_lines
from engines.env.feedback import all_passed, attempt_observation, edit_echo, test_summary
from engines.env.grader import node_args
from engines.env.micro import numbered
from engines.env.report import frame_log, report_from_log
from engines.env.sandbox import Runner, make_runner
from engines.env.session_tree import SessionTree
from engines.env.types import GradeResult, StepResult, Task
from engines.env.workspace import base_files
from engines.protocol import EDIT_TOOLS, Action, InvalidAction, parse_action

_VIEW_LINES = 60  # lines shown by a bare `view PATH`


def function_view(path: str, lines: list[str], name: str) -> str:
    """What `view PATH NAME` shows: the numbered lines of the one function `name`."""
    span = function_lines(lines, name)
    if isinstance(span, str):
        return f"error: {path}: {span}"
    return numbered("\n".join(lines[span[0] - 1 : span[1]]), span[0])


class TestsUnavailable(RuntimeError):
    """The harness could not run the tests (not the model's fault)."""


# Runs a task's tests against an episode's tree as it stands (the pool grades its diff).
Tester = Callable[[Task, SessionTree], GradeResult]


class EnvSession:
    def __init__(self, task: Task, config: EnvConfig, tree: SessionTree, tester: Tester | None = None):
        self.task, self.config, self.tree, self.tester = task, config, tree, tester
        self.done = False
        self.attempts = 0  # edits tested under edit feedback
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
            handler = self._edit if action.tool in EDIT_TOOLS else getattr(self, f"_{action.tool}")
            if action.tool in EDIT_TOOLS and self.config.edit_attempts:
                saved = self._saved(action.path)
                return self._attempt(handler(action), saved)
            return StepResult(self._clip(handler(action)), False)

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
        if action.scope:
            return function_view(action.path, lines, action.scope)
        start = max(1, action.line or 1)
        end = min(len(lines), action.end_line or start + _VIEW_LINES - 1)
        if start > len(lines):
            return f"error: {action.path} has {len(lines)} lines"
        return numbered("\n".join(lines[start - 1 : end]), start)

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
        run = self._sandbox().run(action.body, self.tree.root)
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

    def _attempt(self, edited: str, saved: tuple[str, bytes] | None) -> StepResult:
        """Edit feedback (engines/env/feedback.py): the edit just made is tested, kept
        when the tests pass (the episode ends) and rolled back when they fail. An edit
        that did not apply is no attempt. The tests failing to run at all is the
        harness's failure, raised so the episode is marked, not graded."""
        if edited.startswith("error:") or saved is None:
            return StepResult(self._clip(edited), False)
        statuses = self._statuses()
        if statuses is None:  # a timeout is the edit's fault (an endless loop, say)
            statuses = {t: "TIMEOUT" for t in (*self.task.FAIL_TO_PASS, *self.task.PASS_TO_PASS)}
        self.attempts += 1
        passed = all_passed(statuses)
        if not passed:
            self.tree.write_bytes(*saved)
        self.done = passed or self.attempts >= self.config.edit_attempts
        return StepResult(
            self._clip(attempt_observation(statuses, self.attempts, self.config.edit_attempts)), self.done
        )

    def _statuses(self) -> dict[str, str] | None:
        """Per-test status of the current tree; None when the run timed out.

        With a tester and tests that live in the repository (no test_patch), every
        F2P and P2P test runs on the current diff in the tester's warm sandbox. Else a
        cold sandbox runs the FAIL_TO_PASS tests.
        """
        if self.tester is not None and not self.task.test_patch:
            result = self.tester(self.task, self.tree)
            if result.infra_failure:
                raise TestsUnavailable(result.infra_message)
            return None if "timed out" in result.notes else dict(result.report)
        ids = list(self.task.FAIL_TO_PASS)
        cmd = " ".join([self.task.test_cmd, *node_args(ids)])
        run = self._sandbox().run(cmd, self.tree.root)
        if not run.started:
            raise TestsUnavailable(run.infra_message)
        if run.timed_out:
            return None
        return report_from_log(frame_log(run.output, run.exit_code), self.task.log_parser, ids, []).statuses

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
        limit = self.config.observation_chars
        return text if len(text) <= limit else text[: limit - 20] + "\n[... truncated]"
