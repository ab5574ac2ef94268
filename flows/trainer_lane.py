"""The trainer lane: a flow run in its own process (the rl flow starts it with
`python -m flows.trainer_lane --config FILE`). With `trainer.processes` 1 the lane
trains in place, a Prefect task per step; with more, the steps run under torchrun
(one rank per process, `trainer.parallelism` applied on every rank) and this flow
follows their published versions."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency
from prefect.utilities.annotations import quote

from engines.trainer.lane import LaneConfig, TrainerLane, wait_for_step
from flows.metrics import MetricsConfig, MetricsSink, metrics_sink
from storage import checkpoints
from storage.fs import open_store
from tasks.limits import SLOT_LEASE_S, TRAINING_LIMIT
from tasks.progress import say


@task(name="wait-for-rollouts", cache_policy=NO_CACHE)
def wait_for_rollouts(lane: TrainerLane, step: int) -> None:
    wait_for_step(lane.store, lane.cfg, step)


@task(name="train-step", cache_policy=NO_CACHE)
def train_step(lane: TrainerLane, step: int) -> dict:
    return lane.train(step)


@task(name="torchrun-steps", cache_policy=NO_CACHE)
def torchrun_steps(cfg: LaneConfig, processes: int) -> int:
    """Run the lane under torchrun; print each published version as it appears."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(cfg.model_dump_json())
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "engines.trainer.lane",
        "--config",
        f.name,
    ]
    proc = subprocess.Popen(cmd)
    store, seen = open_store(cfg.storage), -1
    while proc.poll() is None:
        latest = checkpoints.latest(store, cfg.run)
        if latest is not None and latest.version > seen:
            seen = latest.version
            say(f"[trainer] published v{seen}")
        time.sleep(1.0)
    os.unlink(f.name)
    if proc.returncode:
        raise RuntimeError(f"torchrun trainer lane exited with code {proc.returncode}")
    return seen


@flow(name="trainer-lane", log_prints=True)
def trainer_lane(config: LaneConfig, tensorboard_dir: str | None = None) -> list[dict]:
    # One trainer owns the machine's cores or devices for its whole life. Taking the slot
    # once per step instead cost about 2 s per step: right after a release Prefect's
    # slot accounting still refuses the next acquisition for a while.
    with concurrency(TRAINING_LIMIT, occupy=1, lease_duration=SLOT_LEASE_S):
        if config.trainer.processes > 1:
            torchrun_steps(config, config.trainer.processes)
            return []
        return _train_in_process(config, metrics_sink(MetricsConfig(tensorboard_dir=tensorboard_dir), "trainer"))


def _train_in_process(config: LaneConfig, sink: MetricsSink | None = None) -> list[dict]:
    lane = TrainerLane(config)
    if lane.next_step > config.first_step:
        say(f"[trainer] resuming run {config.run} at step {lane.next_step} (state from {config.state_path()})")
    results = []
    try:
        last = config.first_step + config.num_steps
        for step in range(lane.next_step, last):
            wait_for_rollouts(quote(lane), step)
            m = train_step(quote(lane), step)
            results.append(m)
            if sink is not None:
                sink.log(step, m, "trainer")
            say(
                f"[trainer] step {step + 1}/{last} -> v{step + 1} "
                + " ".join(
                    f"{k}={m[k]:.4g}"
                    for k in ("loss", "mismatch_kl", "entropy", "grad_norm", "training_s")
                    if m.get(k) is not None
                )
            )
    finally:
        lane.close()
        if sink is not None:
            sink.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the trainer lane flow from a LaneConfig JSON file.")
    parser.add_argument("--config", required=True)
    parser.add_argument("--tensorboard-dir", default=None, help="Also write each step's metrics here (TensorBoard).")
    args = parser.parse_args(argv)
    cfg = LaneConfig.model_validate(json.loads(Path(args.config).read_text()))
    trainer_lane(cfg, args.tensorboard_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
