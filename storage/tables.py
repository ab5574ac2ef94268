"""The small tables beside the rollouts: per-step metrics, the task corpus, re-grades,
the advantages trained on."""

from __future__ import annotations

import numbers
from datetime import UTC, datetime
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
    # None means 'not measured this step': left out, like an absent key.
    others = {k: v for k, v in metrics.items() if k not in STEPS.names and v is not None}
    not_numbers = sorted(k for k, v in others.items() if not isinstance(v, numbers.Real))
    if not_numbers:
        raise ValueError(
            f"step metrics {not_numbers} are neither columns of the steps table nor numbers; "
            f"give them as numbers (they go to `extra`) or use a column: {sorted(known)}"
        )
    extra = {k: float(v) for k, v in others.items()}
    row.update(run_id=run, step=step, extra=list(extra.items()), written_at=datetime.now(UTC))
    table = pa.Table.from_pylist([row], schema=STEPS)
    return write_table(store, layout.steps_file(run, step), table, "steps")


def write_tasks(store: Store, run: str, tasks: pa.Table, name: str = "corpus") -> str:
    """Copy of the task corpus a run uses, so queries can join episodes to tasks."""
    return write_table(store, layout.tasks_file(run, name), tasks, "tasks")


def write_rescores(store: Store, run: str, step: int, table: pa.Table) -> str:
    """Re-grades of one source step's episodes (storage.schema.RESCORES), in run `run`."""
    return write_table(store, layout.rescore_file(run, step), table, "rescores")


def write_advantages(store: Store, run: str, step: int, table: pa.Table) -> str:
    """The advantages run `run`'s trainer used at `step` (storage.schema.ADVANTAGES)."""
    return write_table(store, layout.advantages_file(run, step), table, "advantages")
