"""The trainer lane's ranks under torchrun when the run has trackers: every rank
trains, and rank 0 alone logs each step to the trackers, as the in-process lane does
(every rank computes the same step's metrics, and one writer keeps one tracker run
per lane).

    torchrun --nproc_per_node N -m flows.trainer_ranks --config LANE.json --metrics METRICS.json
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping

from engines.handoff import work_dir
from engines.trainer.lane import LaneConfig, leave_group, start_rank, train_steps
from flows.metrics import MetricsConfig, MetricsSink
from flows.sinks import metrics_sink


def logs_to_trackers(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process writes the trackers: global rank 0 (torchrun's RANK; a process
    started without torchrun is the only rank)."""
    return int(env.get("RANK", "0")) == 0


def lane_sink(config: LaneConfig, metrics: MetricsConfig) -> MetricsSink | None:
    """The run's trackers for the trainer lane, their local files in the run's work folder."""
    run_dir = work_dir(config.storage.root, config.run)
    run_dir.mkdir(parents=True, exist_ok=True)
    return metrics_sink(metrics, "trainer", config.run, run_dir, config.model_dump(mode="json"))


def step_logger(sink: MetricsSink | None) -> Callable[[int, dict], None] | None:
    """What each step's metrics go through: the sink, on the rank that has one."""
    if sink is None:
        return None
    return lambda step, m: sink.log(step, m, "trainer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="JSON file holding a LaneConfig")
    parser.add_argument("--metrics", required=True, help="MetricsConfig JSON: the trackers rank 0 writes")
    args = parser.parse_args(argv)
    start_rank()
    config = LaneConfig.from_file(args.config)
    sink = lane_sink(config, MetricsConfig.model_validate_json(args.metrics)) if logs_to_trackers() else None
    try:
        train_steps(config, step_logger(sink))
    finally:
        if sink is not None:
            sink.close()
    leave_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
