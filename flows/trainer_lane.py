"""The trainer lane: a flow run in its own process (the rl flow starts it with
`python -m flows.trainer_lane --config FILE`). With `trainer.processes` 1 the lane
trains in place, a Prefect task per step; with more, the steps run under torchrun
(one rank per process, `trainer.parallelism` applied on every rank; with trackers,
rank 0 logs to them, flows/trainer_ranks.py) and this flow follows their published
versions."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext

from prefect import flow

from engines.devices import VISIBLE, visible_devices
from engines.lifetime import end_with_owner
from engines.trainer.lane import LaneConfig, TrainerLane
from engines.trainer.torchrun import LANE_ENTRY
from flows.metrics import MetricsConfig, MetricsSink
from flows.parent_watch import ends_with_parent
from flows.prefect_child import run_child
from flows.trainer_ranks import lane_sink
from tasks.limits import training_limit
from tasks.progress import say
from tasks.slots import held_slot_sync
from tasks.trainer import torchrun_steps, train_step, wait_for_rollouts


@flow(name="trainer-lane", log_prints=True)
def trainer_lane(config: LaneConfig, metrics: MetricsConfig | None = None, slot_held: bool = False) -> list[dict]:
    """`slot_held`: the process that started this lane holds the training slot for it
    (flows/lane_process.py), across the lane's restarts."""
    # One trainer lane per run, for its whole life. Taking the slot once per step instead
    # cost about 2 s per step: right after a release Prefect's slot accounting still
    # refuses the next acquisition for a while.
    # Nodes after the first train under node 0's lane, which holds the slot for all of them.
    held = slot_held or config.trainer.node_rank > 0
    slot = nullcontext() if held else held_slot_sync(training_limit(config.run))
    # Deployed on another machine, nothing but Prefect links it to its run (flows/parent_watch.py).
    with slot, ends_with_parent(config.run):
        if config.trainer.processes > 1:
            torchrun_steps(config, config.trainer.processes, rank_entry(metrics))
            return []
        check_inherited_devices(config)
        return _train_in_process(config, lane_sink(config, metrics or MetricsConfig(sinks=[])))


def rank_entry(metrics: MetricsConfig | None) -> tuple[str, ...]:
    """What each torchrun rank runs: the lane's own entry, or with trackers the one whose rank 0 logs to them."""
    if metrics is None or not metrics.writes():
        return LANE_ENTRY
    return ("-m", "flows.trainer_ranks", "--metrics", metrics.model_dump_json())


def check_inherited_devices(config: LaneConfig, env: dict[str, str] | None = None) -> None:
    """In this process the trainer sees the GPUs the process was started with: CUDA reads
    CUDA_VISIBLE_DEVICES once, so trainer.devices can be checked here, not set."""
    wanted = visible_devices(config.trainer.devices).get(VISIBLE)
    seen = (os.environ if env is None else env).get(VISIBLE)
    if wanted is not None and seen != wanted:
        raise RuntimeError(
            f"trainer.devices = {config.trainer.devices}: with trainer.processes = 1 the lane trains in this process, "
            f"started with {VISIBLE}={seen!r}. Start it with {VISIBLE}={wanted} (the rl flow's own trainer process "
            "is), use trainer.processes >= 2 (torchrun is started with them), or leave trainer.devices unset"
        )


def _train_in_process(config: LaneConfig, sink: MetricsSink | None = None) -> list[dict]:
    lane = TrainerLane(config)
    if lane.next_step > config.first_step:
        say(f"[trainer] resuming run {config.run} at step {lane.next_step} (state from {config.state_path()})")
    last = config.first_step + config.num_steps

    def report(step: int, m: dict) -> None:
        if sink is not None:
            sink.log(step, m, "trainer")
        keys = ("loss", "mismatch_kl", "entropy", "grad_norm", "training_s")
        shown = " ".join(f"{k}={m[k]:.4g}" for k in keys if m.get(k) is not None)
        say(f"[trainer] step {step + 1}/{last} -> v{step + 1} {shown}")

    try:
        return lane.run(wait_for_rollouts, train_step, report)
    finally:
        if sink is not None:
            sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the trainer lane flow from a LaneConfig JSON file.")
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--metrics", default=None, help="MetricsConfig JSON: the trackers that get each step's metrics."
    )
    parser.add_argument(
        "--flow-run-id",
        default=None,
        help="Run this flow run (created by the rl flow as its child, with the same parameters) "
        "instead of a new top-level one.",
    )
    parser.add_argument(
        "--slot-held",
        action="store_true",
        help="The process that started this lane holds the training slot for it (flows/lane_process.py).",
    )
    args = parser.parse_args(argv)
    # Started by a run (flows/lane_process.py): this lane and torchrun under it end with the run.
    end_with_owner()
    if args.flow_run_id:
        run_child(trainer_lane, args.flow_run_id)
        return 0
    cfg = LaneConfig.from_file(args.config)
    metrics = MetricsConfig.model_validate_json(args.metrics) if args.metrics else None
    trainer_lane(cfg, metrics, slot_held=args.slot_held)
    return 0


if __name__ == "__main__":
    sys.exit(main())
