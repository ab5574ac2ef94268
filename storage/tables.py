"""The small tables beside the rollouts: per-step metrics, the task corpus, re-grades,
the advantages trained on, held-out evaluation episodes; and the lake-level
`experiments` table (one row per learning-lab experiment, only ever appended)."""

from __future__ import annotations

import numbers
import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from storage import layout
from storage.fs import Store
from storage.parquet_io import write_table
from storage.schema import EXPERIMENTS, STEPS


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


def write_evaluations(store: Store, run: str, version: int, name: str, table: pa.Table) -> str:
    """The episodes of evaluation `name` (before, after, evaluate) of `version` of run
    `run` (storage.schema.EVALUATIONS); run_id and version are filled in. Writing the
    same evaluation again replaces it."""
    table = _filled(table, "run_id", run, pa.string())
    table = _filled(table, "version", version, pa.int64())
    return write_table(store, layout.evaluations_file(run, version, name), table, "evaluations")


def append_experiment(store: Store, row: dict[str, Any]) -> str:
    """Add one row to the lake's `experiments` table (columns of storage.schema.EXPERIMENTS;
    started_at defaults to now). Each row is its own file, so experiments started at once
    never overwrite each other."""
    unknown = sorted(set(row) - set(EXPERIMENTS.names))
    if unknown:
        raise ValueError(f"experiments: unknown columns {unknown}; allowed: {EXPERIMENTS.names}")
    row = {"started_at": datetime.now(UTC), **row}
    stamp = row["started_at"].astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    relpath = layout.experiment_file(stamp, row["name"], uuid.uuid4().hex[:8])
    return write_table(store, relpath, pa.Table.from_pylist([row], schema=EXPERIMENTS), "experiments")


def _filled(table: pa.Table, name: str, value: object, type_: pa.DataType) -> pa.Table:
    """`table` with column `name` equal to `value` on every row; rows that say otherwise
    are refused (they would contradict the file's path)."""
    if name not in table.column_names:
        return table.append_column(pa.field(name, type_, nullable=False), pa.array([value] * table.num_rows, type_))
    wrong = set(table.column(name).to_pylist()) - {value}
    if wrong:
        raise ValueError(f"evaluations: column {name!r} holds {sorted(wrong, key=str)[:5]}, not {value!r}")
    return table
