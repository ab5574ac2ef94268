"""Prefect tasks of the rollout lane: wait for a policy, load it, roll out a step,
evaluate. Each wraps one engine call; the heavy objects (server pool, grader) come
in through `RolloutRuntime` and are never cached or persisted by Prefect."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.inference.agent import AgentLoop
from engines.inference.server_pool import ServerPool
from engines.inference.weight_cache import WeightCache
from engines.rollout.evaluate import EvalResult, evaluate
from engines.rollout.step import GradeCache, run_step, sample_step_tasks
from engines.staleness import version_to_use
from storage import checkpoints, shards
from storage.fs import Store
from storage.retention import apply_retention


@dataclass
class RolloutRuntime:
    """Everything the rollout lane works with, built once by the flow."""

    store: Store
    run: str
    pool: ServerPool
    agent: AgentLoop  # samples at the training temperature
    greedy: AgentLoop  # temperature 0, for pass@1
    grader: GradingPool
    env: EnvConfig
    train_tasks: list[Task]
    weights: WeightCache  # local copies of the versions pulled from an s3:// lake
    started_from: int = 0  # the version whose directory the servers start (and restart) from
    cache: GradeCache = field(default_factory=GradeCache)


async def policy_for_step(
    rt: RolloutRuntime, step: int, async_level: int, timeout_s: float = 3600.0
) -> tuple[int, float]:
    """Newest published version allowed for `step` (blocks while the trainer is behind),
    and the seconds spent waiting."""
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        latest = checkpoints.latest(rt.store, rt.run)
        version = version_to_use(step, async_level, None if latest is None else latest.version)
        if version is not None:
            return version, time.monotonic() - start
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"step {step}: no policy version >= {step - async_level} after {timeout_s:.0f} s; is the trainer lane running?"
            )
        await asyncio.sleep(0.25)


async def load_version(rt: RolloutRuntime, version: int, attempts: int = 3) -> float:
    """Load `version` into every server (a few attempts); returns the seconds this took."""
    start = time.monotonic()
    ckpt = checkpoints.get(rt.store, rt.run, version)
    in_use = {rt.pool.version, rt.started_from}
    weights = await asyncio.to_thread(rt.weights.local_dir, ckpt.uri, version, in_use)
    for attempt in range(attempts):
        try:
            await rt.pool.update_weights(str(weights), version)
            break
        except Exception:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(5)
    return time.monotonic() - start


@task(name="load-final-policy", cache_policy=NO_CACHE)
async def load_final_policy(rt: RolloutRuntime, version: int) -> float:
    """Wait until the trainer published `version` (its last), then serve it."""
    await policy_for_step(rt, version, 0)
    return await load_version(rt, version) if version > rt.pool.version else 0.0


@task(name="rollout-step", cache_policy=NO_CACHE)
async def rollout_step(
    rt: RolloutRuntime, step: int, tasks_per_step: int, group_size: int, seed: int, async_level: int, std_scale: bool
) -> dict[str, Any]:
    """One step as one task (coarse, so Prefect's per-task cost stays small against the
    step): wait for a fresh-enough policy, load it, generate and grade the episodes,
    write the step's `final` shard. Returns small metrics; `task_s` is the time inside
    this task, for measuring Prefect's own overhead."""
    start = time.monotonic()
    version, waited = await policy_for_step(rt, step, async_level)
    update_s = await load_version(rt, version) if version > rt.pool.version else 0.0
    tasks = sample_step_tasks(rt.train_tasks, step, tasks_per_step, seed)
    result = await run_step(
        rt.agent, rt.grader, rt.cache, rt.env, rt.run, step, tasks, group_size, async_level, std_scale
    )
    uri = await asyncio.to_thread(shards.write_shard, rt.store, rt.run, step, "final", result.table)
    t = result.table
    graded = [not f for f in t.column("infra_failure").to_pylist()]  # infra failures say nothing about the policy
    rewards = [r for r, g in zip(t.column("reward").to_pylist(), graded) if g]
    resolved = [r for r, g in zip(t.column("resolved").to_pylist(), graded) if g]
    return {
        "uri": uri,
        "episodes": t.num_rows,
        "reward_mean": sum(rewards) / max(1, len(rewards)),
        "pass_rate": sum(resolved) / max(1, len(resolved)),
        "completion_tokens": sum(t.column("num_completion_tokens").to_pylist()),
        "infra_failures": sum(t.column("infra_failure").to_pylist()),
        "staleness_max": result.staleness_max,
        "generation_s": result.generation_s,
        "grading_s": result.grading_s,
        "policy_version": version,
        "wait_s": waited,
        "weight_update_s": update_s,
        "task_s": time.monotonic() - start,
    }


@task(name="retain-weights", cache_policy=NO_CACHE)
async def retain_weights(rt: RolloutRuntime, keep_last: int, milestone_every: int) -> list[int]:
    """Delete the weight versions the retention policy does not keep; never the one the
    servers serve, nor the one they were started from (a server that dies is restarted
    from that directory, then brought up to the served one)."""
    in_use = {rt.pool.version, rt.started_from}
    return await asyncio.to_thread(apply_retention, rt.store, rt.run, keep_last, milestone_every, in_use)


@task(name="evaluate", cache_policy=NO_CACHE)
async def evaluate_policy(rt: RolloutRuntime, tasks: list[Task], k: int, version: int) -> dict[str, Any]:
    result: EvalResult = await evaluate(rt.greedy, rt.agent, rt.grader, rt.cache, rt.env, tasks, k, version)
    return result.as_dict()
