"""The Weights & Biases and MLflow sinks (flows/metrics.py holds the protocol and the
choice of sinks). Each lane of a run gets its own tracker run, so the two lane
processes never write to one record at the same time:

- W&B: run id `<run>-<lane>`, group `<run>`, job type the lane, offline by default
  (files under `<run dir>/wandb`). A restarted lane starts a new offline file with the
  same id, which `wandb sync` appends to the same run.
- MLflow: a run named `<run>-<lane>`, tagged `tandem.run` and `tandem.lane`; a
  restarted lane finds it by those tags and goes on logging into it. The default
  store is SQLite in the run's directory (MLflow's file store refuses new use unless
  MLFLOW_ALLOW_FILE_STORE is set); creating it is locked, so the two lanes starting
  at once do not both create its tables.

Held-out evaluations become a table with one row per evaluation (before, after):
`eval/heldout` in W&B, the artifact `heldout_evaluations.json` in MLflow (shown in its
UI's table view), plus each number as `eval/<name>/<key>` at the evaluation's step.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flows.metrics import MetricsConfig, evaluation_row, metric_name, scalars

EVALUATION_TABLE = "heldout_evaluations.json"


class WandbSink:
    def __init__(self, config: MetricsConfig, lane: str, run: str, run_dir: Path, settings: Mapping[str, Any]) -> None:
        import wandb

        run_dir.mkdir(parents=True, exist_ok=True)
        self.wandb = wandb
        self.run = wandb.init(
            project=config.wandb_project,
            id=f"{run}-{lane}",
            name=f"{run}-{lane}",
            group=run,
            job_type=lane,
            dir=str(run_dir),
            mode=config.wandb_mode,
            # Offline runs cannot be resumed in place: a restart writes a new file with the same id.
            resume="allow" if config.wandb_mode == "online" else None,
            config=dict(settings),
            # silent: the terminal shows the step lines only (quiet still prints where the
            # offline files are); console off: W&B leaves stdout alone.
            settings=wandb.Settings(silent=True, console="off", reinit="create_new"),
        )
        self.rows: list[dict[str, Any]] = []

    def log(self, step: int, metrics: Mapping[str, object], prefix: str) -> None:
        self.run.log({f"{prefix}/{k}": v for k, v in scalars(metrics).items()}, step=step)

    def log_evaluation(self, step: int, name: str, result: Mapping[str, object]) -> None:
        """The table of every evaluation so far (a W&B table is written whole each time)."""
        self.rows.append(evaluation_row(name, result))
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        table = self.wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in self.rows])
        numbers = {f"eval/{name}/{k}": v for k, v in scalars(result).items()}
        self.run.log({"eval/heldout": table, **numbers}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    def __init__(self, config: MetricsConfig, lane: str, run: str, run_dir: Path, settings: Mapping[str, Any]) -> None:
        from filelock import FileLock

        run_dir = run_dir.absolute()
        run_dir.mkdir(parents=True, exist_ok=True)
        uri = config.mlflow_tracking_uri or f"sqlite:///{run_dir / 'mlflow.db'}"
        # The default store's artifacts beside it; a given server keeps its own artifact root.
        artifacts = None if config.mlflow_tracking_uri else (run_dir / "mlflow-artifacts").as_uri()
        with FileLock(str(run_dir / ".mlflow.lock"), timeout=300):
            self.client = _client(uri)
            experiment = self.client.get_experiment_by_name(config.mlflow_experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(config.mlflow_experiment, artifact_location=artifacts)
            )
            self.run_id = self._find_or_create(experiment_id, run, lane, settings)

    def _find_or_create(self, experiment_id: str, run: str, lane: str, settings: Mapping[str, Any]) -> str:
        found = self.client.search_runs(
            [experiment_id], f"tags.`tandem.run` = '{run}' AND tags.`tandem.lane` = '{lane}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        created = self.client.create_run(
            experiment_id, run_name=f"{run}-{lane}", tags={"tandem.run": run, "tandem.lane": lane}
        )
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in flat_params(settings)]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(created.info.run_id, params=params[i : i + 100])
        return created.info.run_id

    def log(self, step: int, metrics: Mapping[str, object], prefix: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_name(f"{prefix}/{k}"), v, now, step) for k, v in scalars(metrics).items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def log_evaluation(self, step: int, name: str, result: Mapping[str, object]) -> None:
        """A row appended to the run's evaluation table, and its numbers as metrics."""
        row = evaluation_row(name, result)
        self.client.log_table(self.run_id, {k: [v] for k, v in row.items()}, EVALUATION_TABLE)
        self.log(step, result, f"eval/{name}")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    # MLflow and alembic announce a new store's tables at INFO; the terminal shows step lines only.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return MlflowClient(uri)


def flat_params(settings: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """Nested settings as MLflow params: dotted keys, leaves as JSON text (MLflow caps a value at 6000 chars)."""
    for key, value in settings.items():
        if isinstance(value, Mapping):
            yield from flat_params(value, f"{prefix}{key}.")
        else:
            yield metric_name(f"{prefix}{key}"), json.dumps(value)[:6000]
