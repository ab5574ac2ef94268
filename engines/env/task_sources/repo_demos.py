"""Warm-start demonstrations for tasks from real repositories: the tools and the edit
form, not the fixes.

The micro demonstrator (micro_demos.py: candidate_messages) generalised to the
builder's tasks. It knows what any reader of the problem statement with the run's hint
knows, the file and the function (`Class.method`) the bug is in, and it knows the
builder's mutation kinds (engines/env/task_sources/mutations.py). Its plausible fixes are those same
mutations applied to the buggy function, each kind's mirror included (a constant
moved by one either way), so the fix is one of them whenever the bug's kind is its own
inverse (an operator, a comparison, `and`/`or`, a constant, swapped operands). It tries
them in random order, never one twice:

    view FILE NAME                   the function, as the session shows it
    change FILE NAME / OLD / NEW     one candidate (OLD at least two tokens, spaced)
    <which tests fail>, kept ...     the real tests' verdict on it
    undo                             kept feedback: the tree back as it was
    ...                              the next candidate, until one passes or the
                                     attempts run out (every attempt trained)

Every observation is the session's own text, and every verdict comes from running
the task's tests on that candidate in the grading pool. A task whose fix is no
candidate (a removed statement, a removed `not`) or spans more than one line gets no
demonstration; `demonstrable_share` says how many do.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engines.env.edit_spans import short_span, with_leading_space
from engines.env.feedback import all_passed, attempt_observation, undo_observation
from engines.env.grader import GradingPool
from engines.env.scopes import Definition, innermost, resolve
from engines.env.task_sources.mutations import Mutation, mutations
from engines.env.types import Task
from engines.env.views import function_view, page
from engines.env.workspace import apply_to_files, base_files, unified_diff
from engines.protocol import Action, render_action

# Runs the visible tests of each (task, patch): test id -> status, as the session's `test`
# shows them; None where the harness failed (that demonstration is left out).
PatchTester = Callable[[Sequence[tuple[Task, str]]], list[dict[str, str] | None]]


def pool_tester(pool: GradingPool) -> PatchTester:
    """The grading pool as a PatchTester: the statuses a session's tester call reports."""

    def test(items: Sequence[tuple[Task, str]]) -> list[dict[str, str] | None]:
        out: list[dict[str, str] | None] = []
        for (task, _), result in zip(items, pool.grade_many(items, fast=True)):
            if result.infra_failure:
                out.append(None)
            elif "timed out" in result.notes:
                out.append({t: "TIMEOUT" for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)})
            else:
                out.append(dict(result.report))
        return out

    return test


@dataclass(frozen=True)
class Candidate:
    line: int  # 1-based line of the buggy file the candidate rewrites
    text: str  # that line after it
    patch: str  # the buggy file -> the candidate, as a diff the grader applies
    action: Action  # how the demonstration writes it


@dataclass(frozen=True)
class Plan:
    """What a task's demonstration works from."""

    path: str
    lines: list[str]  # the buggy file
    scope: Definition  # the function (or class) the bug is in
    candidates: list[Candidate]  # the gold fix among them
    fix: Candidate


def plan(task: Task, old_tokens: int = 2) -> Plan | None:
    """The buggy function and its plausible fixes, or None when the task's fix is none of
    them; each candidate's OLD at least `old_tokens` whole tokens (`change_action`)."""
    meta = task.meta()
    path = meta.get("file")
    files = base_files(task)
    if not path or path not in files:
        return None
    buggy = files[path].decode()
    lines = buggy.rstrip("\n").split("\n")
    fixed = apply_to_files({path: files[path]}, task.patch, f"task {task.instance_id}: gold patch")[path].decode()
    changed = changed_line(lines, fixed.rstrip("\n").split("\n"))
    if changed is None:
        return None
    found = resolve(lines, meta["function"]) if meta.get("function") else innermost(lines, changed[0])
    if found is None or isinstance(found, str) or not found.first <= changed[0] <= found.last:
        return None
    candidates = _candidates(path, buggy, lines, found, old_tokens)
    fix = next((c for c in candidates if (c.line, c.text) == changed), None)
    return None if fix is None else Plan(path, lines, found, candidates, fix)


def demonstration(
    task: Task, plan: Plan, order: list[Candidate], statuses: list[dict[str, str]], attempts: int, view_lines: int
) -> list[dict]:
    """The episode of trying `order` (the candidates tried, in turn) whose test verdicts are `statuses`."""
    messages: list[dict] = [{"role": "user", "content": task.problem_statement}]
    name = plan.scope.qualname
    messages += _turn(
        Action("view", path=plan.path, scope=name), function_view(plan.path, plan.lines, name, view_lines)
    )
    last = plan.scope.first + view_lines - 1
    if plan.fix.line > last:  # the bug is past the function's first page: the page that holds it
        first = plan.fix.line - (plan.fix.line - plan.scope.first) % view_lines
        end = min(plan.scope.last, first + view_lines - 1)
        shown = page(plan.path, plan.lines, first, end, view_lines)
        messages += _turn(Action("view", path=plan.path, line=first, end_line=end), shown)
    for k, (candidate, verdict) in enumerate(zip(order, statuses), 1):
        messages.append({"role": "assistant", "content": render_action(candidate.action)})
        if all_passed(verdict) or k == attempts:
            break  # the episode ends on this turn: the loop shows no observation after it
        messages.append({"role": "tool", "content": attempt_observation(verdict, k, attempts, kept=True)})
        messages += _turn(Action("undo"), undo_observation(plan.path))
    return messages


def repo_demonstrations(
    tasks: Sequence[Task],
    attempts: int,
    seed: int,
    tester: PatchTester,
    view_lines: int = 60,
    per_task: int = 1,
    old_tokens: int = 2,
) -> list[list[dict]]:
    """`per_task` demonstrations of each task that has a plan (`plan`, its OLD at least
    `old_tokens` whole tokens), each with its own candidate order drawn by `seed` (a small
    corpus gives more than one order of the same candidates); the candidates tried are all
    tested in one call of `tester`, each distinct (task, candidate) once."""
    rng = random.Random(seed)
    work = []
    for task in tasks:
        p = plan(task, old_tokens)
        for _ in range(per_task if p is not None else 0):
            order = list(p.candidates)
            rng.shuffle(order)
            work.append((task, p, order[: max(1, attempts)]))
    distinct = list(dict.fromkeys((task.instance_id, c.patch) for task, _, order in work for c in order))
    by_id = {task.instance_id: task for task, _, _ in work}
    verdict = dict(zip(distinct, tester([(by_id[i], patch) for i, patch in distinct])))
    demos = []
    for task, p, order in work:
        statuses = [verdict[(task.instance_id, c.patch)] for c in order]
        if all(s is not None for s in statuses):
            demos.append(demonstration(task, p, order, statuses, max(1, attempts), view_lines))
    return demos


def source_texts(tasks: Sequence[Task]) -> list[str]:
    """The Python files of the tasks' projects (each snapshot once, as the tasks' bases hold
    them): what a tokenizer for this corpus is trained on besides the demonstrations."""
    seen, texts = set(), []
    for task in tasks:
        if task.snapshot_uri in seen:
            continue
        seen.add(task.snapshot_uri)
        texts += [
            data.decode(errors="replace") for rel, data in sorted(base_files(task).items()) if rel.endswith(".py")
        ]
    return texts


def demonstrable_share(tasks: Sequence[Task]) -> float:
    """Share of `tasks` whose fix is among their plausible candidates."""
    return sum(plan(t) is not None for t in tasks) / len(tasks) if tasks else 0.0


def _turn(action: Action, observation: str) -> list[dict]:
    return [{"role": "assistant", "content": render_action(action)}, {"role": "tool", "content": observation}]


def changed_line(before: list[str], after: list[str]) -> tuple[int, str] | None:
    """(1-based line, new text) when `after` differs from `before` in exactly one line."""
    if len(before) != len(after):
        return None
    diffs = [(i, b) for i, (a, b) in enumerate(zip(before, after), 1) if a != b]
    return diffs[0] if len(diffs) == 1 else None


def _mirrored(buggy: str, found: list[Mutation]) -> list[Mutation]:
    """The inverses the builder's own kinds miss: a constant moved the other way (the
    builder moves v to v+1 when v <= 1, else to v-1), and `not (X)` unwrapped to X
    (an inverted condition wraps X in parentheses that removing `not` would keep)."""
    data = buggy.encode()
    out = []
    for m in found:
        if m.kind == "constant":
            value = int(data[m.start : m.end].decode())
            out.append(Mutation("constant", m.line, m.start, m.end, str(2 * value - int(m.replacement))))
        elif m.kind == "removed_not" and m.replacement.startswith("(") and m.replacement.endswith(")"):
            out.append(Mutation("removed_not", m.line, m.start, m.end, m.replacement[1:-1]))
    return out


def _candidates(path: str, buggy: str, lines: list[str], scope: Definition, old_tokens: int) -> list[Candidate]:
    """Distinct one-line rewrites of the function by the builder's mutation kinds."""
    found = [m for m in mutations(buggy) if scope.first <= m.line <= scope.last]
    seen: dict[tuple[int, str], Candidate] = {}
    for m in [*found, *_mirrored(buggy, found)]:
        changed = changed_line(lines, m.apply(buggy).rstrip("\n").split("\n"))
        if changed is None or changed in seen:
            continue
        line, text = changed
        action = change_action(path, lines, scope, line, text, old_tokens)
        edited = [*lines[: line - 1], text, *lines[line:]]
        patch = unified_diff({path: buggy.encode()}, {path: ("\n".join(edited) + "\n").encode()})
        seen[changed] = Candidate(line, text, patch, action)
    return list(seen.values())


def change_action(path: str, lines: list[str], scope: Definition, line: int, text: str, old_tokens: int = 2) -> Action:
    """`change PATH NAME` with OLD at least `old_tokens` whole tokens (or the whole line) and
    spaced (2: the micro default form), or `change PATH LINE` when no span of the line
    occurs once in the function. A short OLD is a mutation's own shape (`not (`, `+= 1`),
    which a model can write from memory rather than copy from the view; a longer one
    holds the line's names (trainer.sft.old_tokens)."""
    span = short_span(lines[line - 1], text, lines[scope.first - 1 : scope.last], min_width=old_tokens)
    if span is not None:
        old, new = with_leading_space(lines[line - 1], *span)
        return Action("change", path=path, scope=scope.qualname, old=old, new=new)
    old, new = short_span(lines[line - 1], text, [lines[line - 1]]) or (lines[line - 1], text)
    return Action("change", path=path, line=line, old=old, new=new)
