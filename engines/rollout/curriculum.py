"""Which training tasks each RL step takes (rl.curriculum).

`draw`: each step draws its tasks afresh, a function of (seed, step) alone. On a small
pool tasks repeat and others wait: 120 draws from 190 tasks met 87 of them and one 8
times (docs/2026-12-07-real-project-rl.md, R3).
`mixed`: steps walk the training tasks in passes, each pass a seeded order of its pool,
so every task of a pass comes up once before any twice (the few left over at a pass's
end wait for a later one). A pass after the first walks the tasks whose latest group had
mixed outcomes, and those not graded yet: a group that failed whole or passed whole has
zero advantages and trains nothing, and on real projects 78 of 120 groups failed whole
and 15 passed whole (R3). Such a pass is filled to whole steps, at least a quarter of it
(all of it when none is mixed), with set-aside tasks tried again on the newer policy,
those walked longest ago first: a task the policy has grown into comes back without a
pass over every task (R4, which walked all of them again whenever fewer than a step's
worth were mixed, spent 23 of its 60 steps so; R5, with this rule, trained on as many
mixed groups).

A step's tasks depend only on (seed, step) and, under `mixed`, the outcomes of the steps
before its pass, read from the lake's published steps: a step redone after a crash takes
the same tasks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from engines.env.types import Task

Curriculum = Literal["draw", "mixed"]
Outcome = tuple[int, int]  # episodes resolved, episodes graded (harness failures left out)
StepOutcomes = Callable[[int], Mapping[str, Outcome]]
REPROBE_SHARE = 0.25  # of a pass after the first: set-aside tasks tried again


@dataclass(frozen=True)
class _Pass:
    start: int  # its first step
    order: list[Task]


def group_outcomes(table: pa.Table) -> dict[str, Outcome]:
    """Task id -> (resolved, graded) of a step's episodes (its rollouts table)."""
    graded = table.filter(pc.invert(pc.fill_null(table["infra_failure"], False)))
    out: dict[str, Outcome] = {}
    for task_id, resolved in zip(graded["task_id"].to_pylist(), graded["resolved"].to_pylist()):
        passed, seen = out.get(task_id, (0, 0))
        out[task_id] = (passed + bool(resolved), seen + 1)
    return out


class StepTasks:
    """The tasks of each step: `per_step` of `tasks` (module docstring). `outcomes(step)`
    gives a published step's group outcomes; only `mixed` reads them."""

    def __init__(
        self,
        tasks: Sequence[Task],
        per_step: int,
        seed: int,
        curriculum: Curriculum = "draw",
        outcomes: StepOutcomes | None = None,
    ) -> None:
        if curriculum == "mixed" and outcomes is None:
            raise ValueError("rl.curriculum = 'mixed' reads each published step's outcomes: give `outcomes`")
        self.tasks, self.per_step, self.seed = list(tasks), per_step, seed
        self.outcomes = outcomes
        self._read: dict[int, Mapping[str, Outcome]] = {}
        walks = curriculum == "mixed" and per_step <= len(self.tasks)  # else drawn afresh, with repeats if few
        self._passes = [self._new_pass(0, self.tasks, 0)] if walks else []

    def __call__(self, step: int) -> list[Task]:
        if not self._passes:
            rng = random.Random(f"{self.seed}/{step}")
            if self.per_step <= len(self.tasks):
                return rng.sample(self.tasks, self.per_step)
            return rng.choices(self.tasks, k=self.per_step)
        while step >= self._end(self._passes[-1]):
            self._passes.append(self._next_pass())
        return self._of_pass(next(p for p in reversed(self._passes) if p.start <= step), step)

    def passes(self) -> list[tuple[int, int]]:
        """(first step, tasks) of each pass planned so far: how the curriculum narrowed."""
        return [(p.start, len(p.order)) for p in self._passes]

    def _of_pass(self, p: _Pass, step: int) -> list[Task]:
        """Step `step`'s tasks in pass `p`."""
        slot = step - p.start
        return p.order[slot * self.per_step : (slot + 1) * self.per_step]

    def _end(self, p: _Pass) -> int:
        return p.start + len(p.order) // self.per_step

    def _new_pass(self, number: int, pool: list[Task], start: int) -> _Pass:
        return _Pass(start, random.Random(f"{self.seed}/pass/{number}").sample(pool, len(pool)))

    def _next_pass(self) -> _Pass:
        start = self._end(self._passes[-1])
        band = self._in_band(start)
        steps = max(1, math.ceil(len(band) / (1 - REPROBE_SHARE) / self.per_step))
        size = min(steps * self.per_step, len(self.tasks))
        return self._new_pass(len(self._passes), band + self._stalest(band, size - len(band)), start)

    def _stalest(self, band: list[Task], count: int) -> list[Task]:
        """`count` tasks outside `band`, those walked longest ago (or never) first; ties
        in a seeded order."""
        last: dict[str, int] = {}
        for p in self._passes:
            for step in range(p.start, self._end(p)):
                last.update(dict.fromkeys((t.instance_id for t in self._of_pass(p, step)), step))
        kept = {t.instance_id for t in band}
        aside = [t for t in self.tasks if t.instance_id not in kept]
        aside = random.Random(f"{self.seed}/reprobe/{len(self._passes)}").sample(aside, len(aside))
        return sorted(aside, key=lambda t: last.get(t.instance_id, -1))[:count]

    def _in_band(self, before: int) -> list[Task]:
        """The tasks whose latest group before step `before` was mixed, or never graded."""
        latest: dict[str, Outcome] = {}
        for step in range(before):
            latest.update(self._step_outcomes(step))
        return [t for t in self.tasks if _mixed(latest.get(t.instance_id))]

    def _step_outcomes(self, step: int) -> Mapping[str, Outcome]:
        if step not in self._read:
            assert self.outcomes is not None  # __init__ refuses mixed without it
            self._read[step] = self.outcomes(step)
        return self._read[step]


def _mixed(outcome: Outcome | None) -> bool:
    """Not graded yet, or some episodes of its group passed and some failed."""
    return outcome is None or 0 < outcome[0] < outcome[1]
