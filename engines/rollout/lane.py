"""The rollout lane of the asynchronous RL loop, the trainer lane's counterpart
(engines/trainer/lane.py: TrainerLane).

For each step s: wait until a policy fresh enough for s is published
(engines/handoff.py, the lanes' contract), serve it, generate and grade the step's episodes, and
publish them as the step's `final` shard, which completes the step for the trainer
lane. The lane holds what every step works with (servers, agents, grader, store), so
each call names only its step; Prefect's tasks (tasks/rollout.py) wrap its methods
one to one.

Crash and restart: a step whose shard exists is done (`is_published`); a step redone
asks the same tasks (a function of the seed and the step) and its shard replaces the
earlier attempt's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.types import Task
from engines.handoff import PolicyWait, publish_step, step_complete, wait_for_policy
from engines.inference.agent import AgentLoop
from engines.inference.server_pool import ServerPool
from engines.rollout.curriculum import Curriculum, StepTasks, group_outcomes
from engines.rollout.evaluate import evaluate_tasks
from engines.rollout.records import evaluations_table
from engines.rollout.step import GradeCache, StepRollouts, run_step
from engines.rollout.weight_cache import WeightCache
from engines.step_metrics import episode_metrics
from storage import checkpoints, tables
from storage.fs import Store
from storage.retention import apply_retention
from storage.shards import read_step

log = logging.getLogger("tandem.rollout")


@dataclass(frozen=True)
class RolloutSettings:
    """How the lane rolls out a step (from the run's `rl` settings)."""

    tasks_per_step: int
    group_size: int
    seed: int
    async_level: int
    curriculum: Curriculum = "draw"  # which tasks each step takes (engines/rollout/curriculum.py)
    policy_timeout_s: float = 3600.0  # give up waiting for the trainer after this long
    load_attempts: int = 3  # tries to load a version into the servers
    load_retry_s: float = 5.0  # pause between those tries


class RolloutLane:
    """The lane's state between steps. A plain class on purpose: Prefect walks
    dataclass, list and dict arguments of a task looking for futures (about 1 s per
    call with thousands of tasks inside), and passes other objects as they are."""

    def __init__(
        self,
        store: Store,
        run: str,
        pool: ServerPool,
        agent: AgentLoop,
        greedy: AgentLoop,
        grader: GradingPool,
        env: EnvConfig,
        settings: RolloutSettings,
        train_tasks: Sequence[Task] = (),
        heldout: Sequence[Task] = (),
        started_from: int = 0,
        *,
        weights: WeightCache,
    ) -> None:
        self.store, self.run, self.pool, self.grader, self.env = store, run, pool, grader, env
        self.agent = agent  # samples at the training temperature
        self.greedy = greedy  # temperature 0, for pass@1
        self.settings = settings
        self.train_tasks, self.heldout = list(train_tasks), list(heldout)
        self.started_from = started_from  # the version the servers start (and restart) from
        self.weights = weights  # local copies of the versions pulled from an s3:// lake
        self.cache = GradeCache()
        self.step_tasks = StepTasks(
            self.train_tasks, settings.tasks_per_step, settings.seed, settings.curriculum, self._published_outcomes
        )

    @property
    def served(self) -> int:
        """The weight version the servers serve."""
        return self.pool.version

    def is_published(self, step: int) -> bool:
        return step_complete(self.store, self.run, step)

    def _published_outcomes(self, step: int) -> dict[str, tuple[int, int]]:
        """A published step's group outcomes, read from the lake: the same after a restart."""
        return group_outcomes(read_step(self.store, self.run, step))

    async def wait_for_policy(self, step: int, async_level: int | None = None) -> PolicyWait:
        """The newest published version allowed for `step`, once there is one (blocks
        while the trainer is behind). `async_level` defaults to the settings'."""
        level = self.settings.async_level if async_level is None else async_level
        return await wait_for_policy(self.store, self.run, step, level, self.settings.policy_timeout_s)

    async def load_policy(self, version: int) -> float:
        """Serve `version` unless it is already served; returns the seconds this took."""
        if version <= self.served:
            return 0.0
        start = time.monotonic()
        uri = (await asyncio.to_thread(checkpoints.get, self.store, self.run, version)).uri
        in_use = {self.served, self.started_from}
        weights = str(await asyncio.to_thread(self.weights.local_dir, uri, version, in_use))
        for attempt in range(self.settings.load_attempts):
            try:
                await self.pool.update_weights(weights, version)
                break
            except Exception as exc:
                if attempt == self.settings.load_attempts - 1:
                    raise
                log.warning("loading version %d failed (%s); trying again", version, exc)
                await asyncio.sleep(self.settings.load_retry_s)
        return time.monotonic() - start

    async def generate(self, step: int) -> StepRollouts:
        """The step's episodes, generated by the served policy and graded."""
        s = self.settings
        tasks = await asyncio.to_thread(self.step_tasks, step)  # a new pass may read the lake
        return await run_step(
            self.agent, self.grader, self.cache, self.env, self.run, step, tasks, s.group_size, s.async_level
        )

    async def publish(self, step: int, result: StepRollouts) -> str:
        """Write the step's `final` shard (the trainer lane may train on it from now on)."""
        return await asyncio.to_thread(publish_step, self.store, self.run, step, result.table)

    async def roll_out(self, step: int) -> dict[str, Any]:
        """One whole step: wait for a fresh-enough policy, serve it, generate, publish.
        Returns the step's metrics (engines/step_metrics.py) and timings."""
        policy = await self.wait_for_policy(step)
        update_s = await self.load_policy(policy.version)
        result = await self.generate(step)
        uri = await self.publish(step, result)
        return {
            "uri": uri,
            "episodes": result.table.num_rows,
            **episode_metrics(result.table, step),
            "generation_s": result.generation_s,
            "grading_s": result.grading_s,
            "policy_version": policy.version,
            "wait_s": policy.waited_s,
            "weight_update_s": update_s,
        }

    async def serve_final(self, version: int) -> float:
        """Wait until the trainer published `version` (its last), then serve it."""
        await self.wait_for_policy(version, async_level=0)
        return await self.load_policy(version)

    def retain(self, keep_last: int, milestone_every: int) -> list[int]:
        """Delete the weight versions the retention policy does not keep; never the one
        served, nor the one the servers start from (a server that dies is restarted
        from that directory, then brought up to the served one)."""
        in_use = {self.served, self.started_from}
        return apply_retention(self.store, self.run, keep_last, milestone_every, in_use)

    async def evaluate_policy(
        self, k: int, name: str = "evaluate", progress: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """pass@1 (greedy) and pass@k of the served policy on the held-out tasks, its
        episodes written as evaluation `name` (before, after, evaluate) of the run's
        `evaluations` table; `progress` gets a line at every tenth of each pass."""
        result = await evaluate_tasks(
            self.greedy, self.agent, self.grader, self.cache, self.env, self.heldout, k, self.served, progress
        )
        table = evaluations_table(self.run, result.version, name, result.episodes)
        await asyncio.to_thread(tables.write_evaluations, self.store, self.run, result.version, name, table)
        return result.as_dict()
