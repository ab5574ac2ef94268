"""The edit-feedback protocol: every edit runs the task's tests at once.

With `EnvConfig.edit_attempts = N > 0`, an `edit` (`replace`, `change`) is an attempt.
`EnvConfig.feedback` says what happens to a failing one:

    rollback (micro tasks)      | keep (real repositories)
    3 passed, 1 failed          | 40 passed, 1 failed
    FAILED test_m.py::test_f_0  | FAILED tests/test_a.py::test_x
    reverted (attempt 1 of 3)   | kept (attempt 1 of 3); undo reverts it

Under rollback a failing attempt is undone at once, so the file the model sees and
the line numbers in the prompt stay true. Under keep the tree stays as the agent made
it, so a fix that needs two edits can be assembled, and undoing is the agent's choice
(the `undo` action). Either way the episode ends when the tests that grade the task
all pass in-session (only possible when none of them is hidden: a task with a
`test_patch` is graded on tests the agent never sees, so it must submit) or after N
attempts. This is the behaviour one-shot demonstrations cannot show and RL can
teach: after a failure, try a different plausible edit. Bounded by N, an episode
costs at most N test runs (about 12 ms each for a micro task in a warm sandbox,
where its plain test functions run without pytest).

This module owns the observation text, so the session (engines/env/session.py)
and the demonstrations (engines/env/task_sources/micro_demos.py) render it identically.
"""

from __future__ import annotations

from collections.abc import Mapping

_PASSING = ("PASSED", "XFAIL")
_FAILED_SHOWN = 4  # failing test ids listed


def edit_echo(path: str, line: int, new_lines: list[str]) -> str:
    """What an edit shows: the file and the new lines, numbered from the edited line."""
    shown = (
        "\n".join(f"{i} {text}" for i, text in enumerate(new_lines, line)) if new_lines else f"(line {line} deleted)"
    )
    return f"edited {path}\n{shown}"


def test_summary(statuses: Mapping[str, str]) -> str:
    """What the tests show: counts, then the first failing test ids (sorted)."""
    failed = sorted(t for t, s in statuses.items() if s not in _PASSING)
    head = f"{len(statuses) - len(failed)} passed, {len(failed)} failed"
    return "\n".join([head, *(f"FAILED {t}" for t in failed[:_FAILED_SHOWN])])


def all_passed(statuses: Mapping[str, str]) -> bool:
    return bool(statuses) and all(s in _PASSING for s in statuses.values())


def attempt_observation(
    statuses: Mapping[str, str], attempt: int, max_attempts: int, kept: bool = False, hidden: bool = False
) -> str:
    """The observation of one attempt: the tests, and what became of the edit (`kept`:
    feedback = keep). The edit is not echoed: the model has just written it, and every
    token counts in a tiny context. `hidden`: the task's grading tests are not among
    those run, so passing them is no proof and the agent must submit."""
    text = test_summary(statuses)
    if all_passed(statuses) and not hidden:
        return text
    if all_passed(statuses):
        return f"{text}\nkept (attempt {attempt} of {max_attempts}); hidden tests grade the fix: submit when it is done"
    if kept:
        return f"{text}\nkept (attempt {attempt} of {max_attempts}); undo reverts it"
    return f"{text}\nreverted (attempt {attempt} of {max_attempts})"


def undo_observation(path: str) -> str:
    """What `undo` shows: which file went back to how it was before the last edit."""
    return f"undone: {path} is as it was before your last edit"
