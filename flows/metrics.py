"""Per-step metrics where RL users look for them: TensorBoard, Weights & Biases and
MLflow, beside the Parquet `steps` table and the Prefect artifacts (which stay the
record of the run).

    sink = metrics_sink(config.metrics, "rollout", run, run_dir)   # flows/sinks.py; None when none writes
    sink.log(step, {"reward_mean": 0.4}, "rollout")                # rollout/reward_mean at `step`
    sink.log_evaluation(0, "before", {"pass@1": 0.21, ...})        # a row of the held-out table
    sink.close()

The rollout lane and the trainer lane are separate processes, and each opens its own
sink: TensorBoard gets an event file per lane in one folder (shown as one run, tags
prefixed `rollout/` and `trainer/`), W&B a run per lane in one group named after the
tandem run, MLflow a run per lane tagged with the tandem run's name. Only scalars
(ints, floats, bools) are logged; text and lists stay in Parquet. Each tracker's
library is an optional extra, imported only when its sink is chosen (flows/sinks.py picks
the sinks; flows/trackers.py holds W&B's and MLflow's).
"""

from __future__ import annotations

import importlib.util
import numbers
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

SinkName = Literal["tensorboard", "wandb", "mlflow"]

# Per sink: the modules it imports and the extra of pyproject.toml that installs them.
SINK_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboardX",), "tensorboard"),
    "wandb": (("wandb",), "trackers"),
    "mlflow": (("mlflow", "filelock", "pandas", "sqlalchemy", "alembic"), "trackers"),
}


class MetricsConfig(BaseModel):
    """Copies of every step's metrics and the held-out evaluations for experiment trackers."""

    model_config = ConfigDict(extra="forbid")

    sinks: list[SinkName] = Field(
        default_factory=lambda: ["tensorboard"],
        description="Trackers that get every step's rollout and trainer metrics and the held-out evaluation "
        "table: 'tensorboard' (event files in metrics.tensorboard_dir, written only when that is set), 'wandb' "
        "(a run per lane, grouped by the run's name; offline by default, in <run dir>/wandb), 'mlflow' (a run per "
        "lane in metrics.mlflow_tracking_uri). wandb and mlflow need `pip install 'tandem-rl[trackers]'`.",
    )
    tensorboard_dir: str | None = Field(
        None,
        description="Folder for TensorBoard event files of every step's rollout and trainer metrics (view with "
        "`tensorboard --logdir DIR`; needs the tensorboardX package). Unset: TensorBoard writes nothing.",
    )
    wandb_project: str = Field("tandem-rl", description="W&B project of the lanes' runs.")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="W&B mode: 'offline' writes the runs under <run dir>/wandb only (upload later with "
        "`wandb sync DIR`); 'online' also streams them to the W&B server (needs `wandb login` or WANDB_API_KEY).",
    )
    mlflow_tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (a tracking server 'http://host:5000', a database 'sqlite:///path.db'). "
        "Unset: a SQLite store in the run's directory, <run dir>/mlflow.db (view with "
        "`mlflow ui --backend-store-uri sqlite:///<run dir>/mlflow.db`), artifacts beside it.",
    )
    mlflow_experiment: str = Field("tandem-rl", description="MLflow experiment the lanes' runs go to.")

    @model_validator(mode="after")
    def _check(self) -> MetricsConfig:
        doubled = sorted({s for s in self.sinks if self.sinks.count(s) > 1})
        if doubled:
            raise ValueError(f"metrics.sinks names {doubled} more than once; list each tracker once")
        for sink in self.sinks:
            if sink == "tensorboard" and not self.tensorboard_dir:
                continue  # writes nothing, so needs nothing: the default works without the extra
            modules, extra = SINK_PACKAGES[sink]
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            if missing:
                raise ValueError(
                    f"metrics.sinks: {sink!r} needs {', '.join(missing)}, which this environment lacks: "
                    f"pip install 'tandem-rl[{extra}]' (or remove {sink!r} from metrics.sinks)"
                )
        defaults = MetricsConfig.model_construct()
        for sink, keys in (
            ("tensorboard", ("tensorboard_dir",)),
            ("wandb", ("wandb_project", "wandb_mode")),
            ("mlflow", ("mlflow_tracking_uri", "mlflow_experiment")),
        ):
            changed = [k for k in keys if getattr(self, k) != getattr(defaults, k)]
            if changed and sink not in self.sinks:
                raise ValueError(
                    f"metrics.{changed[0]} is set but metrics.sinks {self.sinks} lacks {sink!r}, so nothing would "
                    f"use it: add {sink!r} to metrics.sinks or leave metrics.{changed[0]} unset"
                )
        return self

    def writes(self) -> bool:
        """Whether any sink would write (TensorBoard only with a folder)."""
        return any(s != "tensorboard" or self.tensorboard_dir for s in self.sinks)


class MetricsSink(Protocol):
    def log(self, step: int, metrics: Mapping[str, object], prefix: str) -> None: ...

    def log_evaluation(self, step: int, name: str, result: Mapping[str, object]) -> None: ...

    def close(self) -> None: ...


def scalars(metrics: Mapping[str, object]) -> dict[str, float]:
    """The numbers among `metrics` (bools as 0/1), without `step`, which is the axis."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real) and k != "step"}


def metric_name(name: str) -> str:
    """A name MLflow and TensorBoard keep as it is (letters, digits, '_', '-', '.', ' ', '/'):
    pass@1 -> pass_at_1. W&B takes any name and gets the original."""
    return re.sub(r"[^\w\-. /]", "_", name.replace("@", "_at_"))


def evaluation_row(name: str, result: Mapping[str, object]) -> dict[str, Any]:
    """One row of the held-out evaluation table: its name and its numbers (pass@1, ...)."""
    return {"evaluation": name, **scalars(result)}


class TensorBoardSink:
    def __init__(self, logdir: str | Path, lane: str) -> None:
        from tensorboardX import SummaryWriter

        # flush_secs: a step's numbers reach the file within seconds, not at the end of the run.
        # The lane in the file name: two writers started in the same second get distinct files.
        self.writer = SummaryWriter(logdir=str(logdir), flush_secs=5, filename_suffix=f".{lane}")

    def log(self, step: int, metrics: Mapping[str, object], prefix: str) -> None:
        for name, value in scalars(metrics).items():
            self.writer.add_scalar(metric_name(f"{prefix}/{name}"), value, global_step=step)
        self.writer.flush()

    def log_evaluation(self, step: int, name: str, result: Mapping[str, object]) -> None:
        """TensorBoard has no tables: each number as eval/<name>/<key> at `step`."""
        self.log(step, scalars(result), f"eval/{name}")

    def close(self) -> None:
        self.writer.close()


class SinkGroup:
    """Several sinks as one: each call goes to every sink, in order."""

    def __init__(self, sinks: list[MetricsSink]) -> None:
        self.sinks = sinks

    def log(self, step: int, metrics: Mapping[str, object], prefix: str) -> None:
        for sink in self.sinks:
            sink.log(step, metrics, prefix)

    def log_evaluation(self, step: int, name: str, result: Mapping[str, object]) -> None:
        for sink in self.sinks:
            sink.log_evaluation(step, name, result)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
