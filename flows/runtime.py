"""Wiring: build the rollout lane from a RunConfig, and tear its components down.
The only place that knows how the pieces fit together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.handoff import RunContext
from engines.inference.agent import AgentLoop
from engines.inference.server_pool import ServerPool
from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from engines.rollout.lane import RolloutLane, RolloutSettings
from engines.rollout.prompt_fit import check_prompts_fit
from engines.rollout.server_hosts import LakeHosts
from engines.rollout.weight_cache import WeightCache
from engines.tool_calls import TOOL_SCHEMAS
from engines.trainer.lane import LaneConfig
from flows.config import RunConfig
from storage import checkpoints
from tasks.corpus import CorpusDraw


def work_dir(config: RunConfig) -> Path:
    """Local files of a run (corpus, server logs, trainer state, trackers' files): inside
    the run when the lake is local, in the cache when it is on S3. A flow holding the
    run's `RunContext` has it there (`context.work`)."""
    return RunContext.open(config.storage, config.run).work


def corpus_draw(config: RunConfig) -> CorpusDraw:
    """What the run takes from a built corpus: tasks.train_tasks, heldout_tasks, seed, hint and eval.tasks."""
    t = config.tasks
    return CorpusDraw(t.train_tasks, t.heldout_tasks, t.seed, t.hint, config.eval.tasks)


def trainer_lane_config(config: RunConfig, model_dir: str, state_dir: Path | None = None) -> LaneConfig:
    """The trainer lane of an rl run, starting from `model_dir`; `state_dir` None: the
    lane's default (the trainer machine's own folder, mirrored into the lake)."""
    return LaneConfig(
        model_dir=model_dir,
        storage=config.storage,
        run=config.run,
        first_step=0,
        num_steps=config.rl.steps,
        state_dir=None if state_dir is None else str(state_dir),
        trainer=config.trainer,
    )


def rollout_settings(config: RunConfig) -> RolloutSettings:
    rl = config.rl
    return RolloutSettings(
        tasks_per_step=rl.batch_size // rl.group_size,
        group_size=rl.group_size,
        seed=rl.seed,
        async_level=rl.async_level,
        curriculum=rl.curriculum,
    )


@contextlib.asynccontextmanager
async def open_rollout_lane(
    config: RunConfig, context: RunContext, train_tasks: list[Task], heldout: list[Task]
) -> AsyncIterator[RolloutLane]:
    """The rollout lane of the run in `context`: server pool on the newest published
    weights, agents, grading pool."""
    store = context.store
    latest = checkpoints.latest(store, config.run)
    if latest is None:
        raise RuntimeError(f"run {config.run!r} has no published weights: warm-start it first (the rl flow does)")
    cache = WeightCache(store, context.work / "weights", config.inference.weight_cache_versions)
    weights = str(await asyncio.to_thread(cache.local_dir, latest.uri, latest.version, {latest.version}))
    inference = config.inference.model_copy(
        update={"model_dir": weights, "log_dir": config.inference.log_dir or str(context.work / "vllm-logs")}
    )
    greedy_cfg = inference.model_copy(update={"sampling": inference.sampling.model_copy(update={"temperature": 0.0})})
    tokenizer = load_tokenizer(weights)
    tools = TOOL_SCHEMAS if inference.tool_format != "text" else None
    check_prompts_fit(  # before any server starts
        ChatFormat.from_tokenizer(tokenizer, weights, tools=tools),
        [*train_tasks, *heldout],
        inference.limits.max_total_tokens,
        inference.sampling.max_tokens_per_turn,
    )
    grader = GradingPool(config.env)
    try:
        remote = None
        if inference.hosts > 1:  # the other hosts' servers, as they report them in the lake
            remote = LakeHosts(store, config.run, inference.startup_timeout_s, config.lanes.poll_interval_s)
        async with ServerPool(inference, version=latest.version, remote=remote) as pool:
            yield RolloutLane(
                store=store,
                run=config.run,
                pool=pool,
                agent=AgentLoop(pool, tokenizer, inference),
                greedy=AgentLoop(pool, tokenizer, greedy_cfg),
                grader=grader,
                env=config.env,
                settings=rollout_settings(config),
                train_tasks=train_tasks,
                heldout=heldout,
                started_from=latest.version,
                weights=cache,
            )
    finally:
        grader.close()
