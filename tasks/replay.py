"""Prefect tasks of the replays: one step of a source run re-graded per task, so a
long run shows progress per step and a failed step is retried alone."""

from __future__ import annotations

from collections.abc import Mapping

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.rollout.rescore import agreement, rescore_episodes
from engines.rollout.step import GradeCache
from storage import shards
from storage.fs import Store
from storage.tables import write_rescores


@task(name="rescore-step", cache_policy=NO_CACHE)
def rescore_step(
    store: Store,
    grader: GradingPool,
    cache: GradeCache,
    tasks: Mapping[str, Task],
    source_run: str,
    run: str,
    step: int,
) -> dict[str, int]:
    """Re-grade the stored episodes of `source_run`'s `step` into `run`'s rescores table."""
    table = rescore_episodes(grader, cache, tasks, shards.read_step(store, source_run, step), run, source_run, step)
    write_rescores(store, run, step, table)
    a = agreement(table)
    return {"step": step, "episodes": table.num_rows, "graded": a.graded, "agree": a.agree, "skipped": a.skipped}
