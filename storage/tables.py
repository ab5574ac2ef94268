"""The small tables beside the rollouts: per-step metrics and the task corpus."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from storage import layout
from storage.fs import Store
from storage.parquet_io import write_table
from storage.schema import STEPS


def write_step_metrics(store: Store, run: str, step: int, metrics: dict[str, Any]) -> str:
    """One row of the `steps` table. Known columns by name; anything else goes to `extra`."""
    known = set(STEPS.names) - {"run_id", "step", "extra", "written_at"}
    row = {k: v for k, v in metrics.items() if k in known}
    extra = {k: float(v) for k, v in metrics.items() if k not in known and isinstance(v, (int, float))}
    row.update(run_id=run, step=step, extra=list(extra.items()), written_at=datetime.now(timezone.utc))
    table = pa.Table.from_pylist([row], schema=STEPS)
    return write_table(store, layout.steps_file(run, step), table, "steps")


def write_tasks(store: Store, run: str, tasks: pa.Table, name: str = "corpus") -> str:
    """Copy of the task corpus a run uses, so queries can join episodes to tasks."""
    return write_table(store, layout.tasks_file(run, name), tasks, "tasks")
