"""Demonstrations of the edit-feedback protocol on micro tasks, with failed attempts.

An oracle episode under edit feedback (engines/env/feedback.py) is one edit that
passes. A model trained only on those has never seen a failed attempt, and after
its own first failure it has no idea what comes next (it tends to repeat itself).
So a share of demonstrations starts with one or two plausible wrong edits: a
single-token mutation of a line, like the bugs the generator injects, that still
fails the tests; then the fix. The wrong attempts are masked from the loss
(`"train": False`): the model learns what to do after a failure, never to make one.

A "candidates" demonstration (`candidate_messages`) knows the tools, not the fixes: it
tries the named function's plausible edits (inverses of the generator's mutation kinds)
in a uniformly random order, never one twice, until the tests pass or the attempts run
out, and every attempt is trained. A model warm-started on it learns to write valid,
distinct edits in the right place; which edit is right is left for the reward to teach.

Observations are computed in-process, as the generator validates its tasks (the
code is the generator's own; the sandboxed grader stays the judge of the model's
patches), and rendered by the same functions as the session's, so a
demonstration reads exactly like a live episode.
"""

from __future__ import annotations

import random
from typing import Literal

from engines.env.config import EnvConfig
from engines.env.feedback import attempt_observation
from engines.env.session import EnvSession
from engines.env.task_sources.edit_forms import VIEWED_FORMS, EditTool, line_edit, oracle_action
from engines.env.task_sources.micro import (
    MODULE,
    TEST_MODULE,
    mutate_line,
    named_function,
    plausible_edits,
    run_module,
)
from engines.env.types import Task
from engines.env.views import function_view
from engines.protocol import Action, render_action

# Who writes the warm start's demonstrations: the oracle (the fix,
# feedback_demonstrations) or the uniform-candidate demonstrator (candidate_demonstrations).
DemonstrationKind = Literal["oracle", "candidates"]


def local_statuses(task: Task, module_source: str) -> dict[str, str]:
    """Status of each of the task's tests on `module_source`, computed in-process."""
    ids = (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)
    namespace = run_module(module_source)
    if namespace is None:
        return {t: "ERROR" for t in ids}
    tests = task.meta()["files"][TEST_MODULE]
    body = "\n".join(line for line in tests.split("\n") if not line.startswith("from "))
    exec(compile(body, TEST_MODULE, "exec"), namespace)
    statuses = {}
    for test_id in ids:
        try:
            namespace[test_id.split("::")[1]]()
            statuses[test_id] = "PASSED"
        except Exception:
            statuses[test_id] = "FAILED"
    return statuses


def opening(task: Task, tool: EditTool) -> list[dict]:
    """The episode's first messages: the problem, and for `viewed_change` and
    `spaced_change` a first turn that views the named function, with the session's own
    observation."""
    messages: list[dict] = [{"role": "user", "content": task.problem_statement}]
    if tool in VIEWED_FORMS:
        name = named_function(task)
        lines = task.meta()["files"][MODULE].rstrip("\n").split("\n")
        messages += [
            {"role": "assistant", "content": render_action(Action("view", path=MODULE, scope=name))},
            {"role": "tool", "content": function_view(MODULE, lines, name)},
        ]
    return messages


def wrong_edits(task: Task, rng: random.Random, count: int) -> list[tuple[int, str]]:
    """Up to `count` distinct (line, new text) single-token edits that fail the tests."""
    buggy = task.meta()["files"][MODULE].rstrip("\n")
    lines = buggy.split("\n")
    fix = (task.meta()["line"], task.meta()["fixed_line"])
    found: list[tuple[int, str]] = []
    for _ in range(20 * count):
        if len(found) == count:
            break
        mutated = mutate_line(buggy, rng)
        if mutated is None or mutated in found or mutated == fix:
            continue
        line, text = mutated
        source = "\n".join(lines[: line - 1] + [text] + lines[line:])
        statuses = local_statuses(task, source)
        if not all(s == "PASSED" for s in statuses.values()):
            found.append(mutated)
    return found


def feedback_messages(
    task: Task, max_attempts: int, wrong: list[tuple[int, str]], tool: EditTool = "edit"
) -> list[dict]:
    """An edit-feedback episode: the `wrong` attempts (masked from the loss), then the fix,
    each written with `tool` (engines/env/task_sources/micro.py: line_edit)."""
    buggy = task.meta()["files"][MODULE]
    lines = buggy.rstrip("\n").split("\n")
    messages = opening(task, tool)
    for attempt, (line, text) in enumerate(wrong[: max_attempts - 1], 1):
        source = "\n".join(lines[: line - 1] + [text] + lines[line:])
        observation = attempt_observation(local_statuses(task, source), attempt, max_attempts)
        messages += [
            {"role": "assistant", "content": render_action(line_edit(buggy, line, text, tool)), "train": False},
            {"role": "tool", "content": observation},
        ]
    fix = line_edit(buggy, task.meta()["line"], task.meta()["fixed_line"], tool)
    messages.append({"role": "assistant", "content": render_action(fix)})
    return messages


def feedback_demonstrations(
    tasks: list[Task], max_attempts: int, failed_share: float, seed: int, tool: EditTool = "edit"
) -> list[list[dict]]:
    """One demonstration per task; `failed_share` of them show one or two failed attempts first."""
    rng = random.Random(seed)
    demos = []
    for task in tasks:
        failures = 0
        if max_attempts > 1 and rng.random() < failed_share:
            failures = rng.randint(1, min(2, max_attempts - 1))
        wrong = wrong_edits(task, rng, failures) if failures else []
        demos.append(feedback_messages(task, max_attempts, wrong, tool))
    return demos


def _passes(task: Task, lines: list[str], line: int, text: str) -> tuple[bool, dict[str, str]]:
    statuses = local_statuses(task, "\n".join(lines[: line - 1] + [text] + lines[line:]))
    return all(v == "PASSED" for v in statuses.values()), statuses


def candidate_messages(task: Task, max_attempts: int, rng: random.Random, tool: EditTool = "edit") -> list[dict]:
    """An episode of the uniform-candidate demonstrator: distinct plausible edits of the
    named function in random order, each followed by its real observation, until one
    passes or `max_attempts` (at least 1) were made. Every attempt is trained."""
    buggy = task.meta()["files"][MODULE]
    lines = buggy.rstrip("\n").split("\n")
    candidates = plausible_edits(buggy, named_function(task))
    rng.shuffle(candidates)
    messages = opening(task, tool)
    for attempt, (line, text, _) in enumerate(candidates[: max(1, max_attempts)], 1):
        messages.append({"role": "assistant", "content": render_action(line_edit(buggy, line, text, tool))})
        passed, statuses = _passes(task, lines, line, text)
        if passed or attempt == max(1, max_attempts):
            break  # the episode ends on this turn: the loop shows no observation after it
        messages.append({"role": "tool", "content": attempt_observation(statuses, attempt, max_attempts)})
    return messages


def candidate_demonstrations(
    tasks: list[Task], max_attempts: int, seed: int, tool: EditTool = "edit"
) -> list[list[dict]]:
    """One uniform-candidate demonstration per task (`candidate_messages`)."""
    rng = random.Random(seed)
    return [candidate_messages(task, max_attempts, rng, tool) for task in tasks]


def warm_start_demonstrations(
    tasks: list[Task],
    max_attempts: int,
    failed_share: float,
    seed: int,
    tool: EditTool = "edit",
    kind: DemonstrationKind = "oracle",
) -> list[list[dict]]:
    """The warm start's demonstrations under edit feedback (max_attempts >= 1): the
    oracle's (`feedback_demonstrations`) or the uniform-candidate demonstrator's."""
    if kind == "candidates":
        return candidate_demonstrations(tasks, max_attempts, seed, tool)
    return feedback_demonstrations(tasks, max_attempts, failed_share, seed, tool)


def oracle_messages(task: Task, tool: EditTool = "edit") -> list[dict[str, str]]:
    """The canonical successful episode: problem, the one-line fix, the real observation, submit."""
    fix = render_action(oracle_action(task, tool))
    with EnvSession.open(task, EnvConfig()) as session:
        observation = session.step(fix).observation
    return [
        *opening(task, tool),
        {"role": "assistant", "content": fix},
        {"role": "tool", "content": observation},
        {"role": "assistant", "content": "submit"},
    ]
