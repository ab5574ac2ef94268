"""Prefect tasks of the trainer lane, one per `TrainerLane` step verb
(engines/trainer/lane.py, where the logic and its tests are). The lane is a plain
object, passed as it is (see tasks/rollout.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.trainer.lane import LaneConfig, TrainerLane
from engines.trainer.torchrun import LANE_ENTRY, torchrun_lane
from tasks.progress import say


@task(name="wait-for-rollouts", cache_policy=NO_CACHE)
def wait_for_rollouts(lane: TrainerLane, step: int) -> None:
    lane.wait_for_rollouts(step)


@task(name="train-step", cache_policy=NO_CACHE)
def train_step(lane: TrainerLane, step: int) -> dict:
    return lane.train(step)


@task(name="torchrun-steps", cache_policy=NO_CACHE)
def torchrun_steps(cfg: LaneConfig, processes: int, entry: tuple[str, ...] = LANE_ENTRY) -> int:
    """Run the lane under torchrun (each rank running `entry`); show each published version as it appears."""
    return torchrun_lane(cfg, processes, lambda v: say(f"[trainer] published v{v}"), entry)
