"""The edit-feedback protocol: every edit runs the task's tests at once.

With `EnvConfig.edit_attempts = N > 0`, an `edit` (or `replace`) is an attempt:

    3 passed, 1 failed          | 4 passed, 0 failed
    FAILED test_m.py::test_f_0  | (the episode ends: the tests pass)
    reverted (attempt 1 of 3)   |

A failing attempt is rolled back, so the file the model sees and the line numbers
in the prompt stay true; the episode ends when the tests pass or after N failing
attempts. This is the behaviour one-shot demonstrations cannot show and RL can
teach: after a failure, try a different plausible edit. Bounded by N, an episode
costs at most N test runs (about 12 ms each for a micro task in a warm sandbox,
where its plain test functions run without pytest).

This module owns the observation text, so the session (engines/env/session.py)
and the demonstrations (engines/env/micro_demos.py) render it identically.
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


def attempt_observation(statuses: Mapping[str, str], attempt: int, max_attempts: int) -> str:
    """The observation of one attempt: the tests, and the rollback. The edit is not
    echoed: the model has just written it, and every token counts in a tiny context."""
    text = test_summary(statuses)
    if all_passed(statuses):
        return text
    return f"{text}\nreverted (attempt {attempt} of {max_attempts})"
