"""Prefect tasks of the rollout lane, one per `RolloutLane` method
(engines/rollout/lane.py, where the logic and its tests are).

The lane is passed as it is: it is a plain object, which Prefect does not walk looking
for futures (it walks dataclasses, lists and dicts: about 1 s per call when the
argument holds thousands of tasks), so no argument needs `quote()`. Heavy objects
are never cached or persisted (NO_CACHE)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.rollout.lane import RolloutLane
from tasks.progress import say


@task(name="rollout-step", cache_policy=NO_CACHE)
async def rollout_step(lane: RolloutLane, step: int) -> dict[str, Any]:
    """One step as one task (coarse, so Prefect's per-task cost stays small against the
    step). `task_s` is the time inside this task, for measuring Prefect's own overhead."""
    start = time.monotonic()
    metrics = await lane.roll_out(step)
    return {**metrics, "task_s": time.monotonic() - start}


@task(name="load-final-policy", cache_policy=NO_CACHE)
async def load_final_policy(lane: RolloutLane, version: int) -> float:
    return await lane.serve_final(version)


@task(name="retain-weights", cache_policy=NO_CACHE)
async def retain_weights(lane: RolloutLane, keep_last: int, milestone_every: int) -> list[int]:
    return await asyncio.to_thread(lane.retain, keep_last, milestone_every)


@task(name="evaluate", cache_policy=NO_CACHE)
async def evaluate_policy(lane: RolloutLane, k: int, name: str) -> dict[str, Any]:
    """Evaluation `name` of the served policy; its episodes go to the run's `evaluations`."""
    return await lane.evaluate_policy(k, name, progress=say)
