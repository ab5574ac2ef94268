"""Per-step metrics where RL users look for them: TensorBoard event files, beside the
Parquet `steps` table and the Prefect artifacts (which stay the record of the run).

    sink = metrics_sink(config.metrics, "rollout")   # None unless metrics.tensorboard_dir is set
    sink.log(step, {"reward_mean": 0.4}, "rollout")

Written with tensorboardX (numpy and protobuf only; TensorBoard itself is needed
only to view them: `tensorboard --logdir DIR`). The rollout lane and the trainer lane
are separate processes: each writes its own event file in the same folder, and
TensorBoard shows them as one run, tags prefixed `rollout/` and `trainer/`.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field


class MetricsConfig(BaseModel):
    """Optional copies of the per-step metrics for experiment trackers (off by default)."""

    model_config = ConfigDict(extra="forbid")

    tensorboard_dir: str | None = Field(
        None,
        description="Folder for TensorBoard event files of every step's rollout and trainer metrics (view with "
        "`tensorboard --logdir DIR`; needs the tensorboardX package). Unset: metrics go to Parquet and Prefect only.",
    )


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, object], prefix: str) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    def __init__(self, logdir: str | Path, lane: str) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise RuntimeError(
                "metrics.tensorboard_dir needs tensorboardX: pip install 'tandem-rl[tensorboard]'"
            ) from None
        # flush_secs: a step's numbers reach the file within seconds, not at the end of the run.
        # The lane in the file name: two writers started in the same second get distinct files.
        self.writer = SummaryWriter(logdir=str(logdir), flush_secs=5, filename_suffix=f".{lane}")

    def log(self, step: int, metrics: dict[str, object], prefix: str) -> None:
        """Scalars only (ints, floats, bools); other values (lists, text) are left to Parquet."""
        for name, value in metrics.items():
            if isinstance(value, numbers.Real) and name != "step":
                self.writer.add_scalar(f"{prefix}/{name}", float(value), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def metrics_sink(config: MetricsConfig, lane: str) -> MetricsSink | None:
    """The sink `config` asks for, for one lane ('rollout', 'trainer'); None when off."""
    return TensorBoardSink(config.tensorboard_dir, lane) if config.tensorboard_dir else None
