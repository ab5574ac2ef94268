"""Wiring: build the rollout lane's components from a RunConfig, and tear them
down. The only place that knows how the pieces fit together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.inference.agent import AgentLoop
from engines.inference.server_pool import ServerPool
from engines.inference.weight_cache import WeightCache
from engines.model.load import load_tokenizer
from flows.run_config import RunConfig
from storage import checkpoints
from storage.fs import Store
from tasks.rollout import RolloutRuntime


def work_dir(config: RunConfig) -> Path:
    """Local files of a run (corpus, server logs, trainer state): inside the run when
    the lake is local, in the cache when it is on S3."""
    root = config.storage.root
    base = Path.home() / ".cache" / "tandem-rl" / "work" if root.startswith("s3://") else Path(root).absolute()
    path = base / config.run
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.asynccontextmanager
async def rollout_runtime(config: RunConfig, store: Store, train_tasks: list[Task]) -> AsyncIterator[RolloutRuntime]:
    """Server pool on the newest published weights, agents, grading pool."""
    latest = checkpoints.latest(store, config.run)
    if latest is None:
        raise RuntimeError(f"run {config.run!r} has no published weights: warm-start it first (the rl flow does)")
    cache = WeightCache(store, work_dir(config) / "weights", config.inference.weight_cache_versions)
    weights = str(await asyncio.to_thread(cache.local_dir, latest.uri, latest.version, {latest.version}))
    inference = config.inference.model_copy(
        update={"model_dir": weights, "log_dir": config.inference.log_dir or str(work_dir(config) / "vllm-logs")}
    )
    greedy_cfg = inference.model_copy(update={"sampling": inference.sampling.model_copy(update={"temperature": 0.0})})
    tokenizer = load_tokenizer(weights)
    grader = GradingPool(config.env)
    try:
        async with ServerPool(inference, version=latest.version) as pool:
            yield RolloutRuntime(
                store=store,
                run=config.run,
                pool=pool,
                agent=AgentLoop(pool, tokenizer, inference),
                greedy=AgentLoop(pool, tokenizer, greedy_cfg),
                grader=grader,
                env=config.env,
                train_tasks=train_tasks,
                started_from=latest.version,
                weights=cache,
            )
    finally:
        grader.close()
