"""Re-grade stored episodes: a source run's final patches through the current grader,
as rows of the `rescores` table (storage.schema.RESCORES), compared with the rewards
the source run stored. Reads the source's rows only; where the rows go is the
caller's choice (never the source run).

An episode that failed in the harness when it was generated has no reward to agree
with: it is not re-graded (`agrees` is null). A row without a patch was written
before patches were stored (schema version 1) and cannot be re-graded at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from engines.env.grader import GradingPool, report_json
from engines.env.types import Task
from engines.rollout.step import GradeCache
from storage.schema import RESCORES

_SOURCE_COLUMNS = ["task_id", "group_id", "sample_index", "reward", "resolved", "patch", "infra_failure"]


@dataclass(frozen=True)
class Agreement:
    """How far re-grades agree with the stored rewards."""

    graded: int  # episodes re-graded
    agree: int  # of those, same reward as stored
    skipped: int  # infrastructure failures at generation: nothing to compare with

    @property
    def rate(self) -> float:
        return self.agree / self.graded if self.graded else float("nan")


def same_reward(a: float | None, b: float | None) -> bool:
    """Equal rewards; NaN (an infrastructure failure) equals NaN."""
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=0.0, abs_tol=1e-9)


def rescore_episodes(
    grader: GradingPool,
    cache: GradeCache,
    tasks: Mapping[str, Task],
    episodes: pa.Table,
    run: str,
    source_run: str,
    step: int,
) -> pa.Table:
    """Rows of `rescores` for one step's stored `episodes` of `source_run`."""
    rows = episodes.select(_SOURCE_COLUMNS).to_pylist()
    missing = sorted({r["task_id"] for r in rows} - set(tasks))
    if missing:
        raise ValueError(
            f"step {step} of run {source_run!r}: tasks {missing[:5]} are not in the run's corpus; "
            "give the corpus the run used"
        )
    todo = [i for i, r in enumerate(rows) if not r["infra_failure"]]
    unpatched = [rows[i]["task_id"] for i in todo if rows[i]["patch"] is None]
    if unpatched:
        raise ValueError(
            f"step {step} of run {source_run!r} has episodes without a stored patch ({len(unpatched)}, "
            f"e.g. task {unpatched[0]}): it was written before patches were stored, so it cannot be re-graded"
        )
    grades = dict(zip(todo, cache.grade(grader, [(tasks[rows[i]["task_id"]], rows[i]["patch"]) for i in todo])))
    out = []
    for i, r in enumerate(rows):
        row = {
            "run_id": run,
            "step": step,
            "source_run": source_run,
            "task_id": r["task_id"],
            "group_id": r["group_id"],
            "sample_index": r["sample_index"],
            "stored_reward": r["reward"],
            "stored_resolved": r["resolved"],
        }
        g = grades.get(i)
        if g is None:
            row.update(
                infra_failure=True, infra_message="not re-graded: the episode failed in the harness when generated"
            )
        else:
            reward = float("nan") if g.infra_failure else g.reward
            row.update(
                reward=reward,
                resolved=g.resolved,
                f2p_passed=g.f2p_passed,
                f2p_total=g.f2p_total,
                p2p_passed=g.p2p_passed,
                p2p_total=g.p2p_total,
                test_report=report_json(g),
                agrees=same_reward(reward, r["reward"]),
                infra_failure=g.infra_failure,
                infra_message=g.infra_message or None,
                grading_s=g.grading_s,
            )
        out.append(row)
    return pa.Table.from_pylist(out, schema=RESCORES)


def agreement(rescores: pa.Table) -> Agreement:
    agrees = rescores.column("agrees").to_pylist()
    graded = [a for a in agrees if a is not None]
    return Agreement(graded=len(graded), agree=sum(graded), skipped=len(agrees) - len(graded))
