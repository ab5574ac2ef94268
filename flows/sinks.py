"""The sinks a lane writes its metrics to, chosen from `metrics.sinks`: TensorBoard
(flows/metrics.py) and W&B or MLflow (flows/trackers.py, each library imported only
when its sink is chosen). Apart from both so neither module imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.metrics import MetricsConfig, MetricsSink, SinkGroup, TensorBoardSink
from flows.trackers import MlflowSink, WandbSink


def metrics_sink(
    config: MetricsConfig, lane: str, run: str, run_dir: Path, settings: Mapping[str, Any] | None = None
) -> MetricsSink | None:
    """The sinks `config` asks for, for one lane ('rollout', 'trainer') of run `run`; None
    when none writes. `run_dir` holds the local trackers' files; `settings` (the lane's
    resolved configuration) becomes the W&B config and the MLflow params."""
    sinks: list[MetricsSink] = []
    try:
        for name in config.sinks:
            if name == "tensorboard" and config.tensorboard_dir:
                sinks.append(TensorBoardSink(config.tensorboard_dir, lane))
            elif name == "wandb":
                sinks.append(WandbSink(config, lane, run, run_dir, settings or {}))
            elif name == "mlflow":
                sinks.append(MlflowSink(config, lane, run, run_dir, settings or {}))
    except BaseException:
        SinkGroup(sinks).close()  # the ones already open are finished, not left running
        raise
    return SinkGroup(sinks) if sinks else None
