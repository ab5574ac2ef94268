"""Rollout shards: the hand-off between the rollout lane and the trainer lane.

Invariants (tested in tests/storage/test_shards.py):
- A shard is visible only once complete (atomic write, see storage.atomic).
- Writing the same (run, step, shard) again replaces it: a retried or resumed
  writer never duplicates a trajectory.
- A corrupt file is reported by name and never hides the other shards.
"""

from __future__ import annotations

import pyarrow as pa

from storage import layout
from storage.errors import NotFoundError
from storage.fs import Store
from storage.parquet_io import read_table, write_table


def write_shard(store: Store, run: str, step: int, shard: str, table: pa.Table) -> str:
    """Write the episodes of (run, step, shard); returns the shard's URL."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    relpath = layout.rollout_shard(run, step, shard)
    table = _with_key_column(table, "run_id", run, pa.string(), relpath)
    table = _with_key_column(table, "step", step, pa.int64(), relpath)
    return write_table(store, relpath, table, "rollouts")


def _with_key_column(table: pa.Table, name: str, value: object, type_: pa.DataType, where: str) -> pa.Table:
    """Fill an absent run_id/step column; refuse rows that disagree with the shard's path,
    since queries take both from the file and would then contradict the layout."""
    if name not in table.column_names:
        return table.append_column(pa.field(name, type_, nullable=False), pa.array([value] * table.num_rows, type_))
    wrong = set(table.column(name).to_pylist()) - {value}
    if wrong:
        raise ValueError(
            f"{where}: column {name!r} holds {sorted(wrong, key=str)[:5]} but the shard is for {name} {value!r}; "
            f"write each {name} to its own shard"
        )
    return table


def list_runs(store: Store) -> list[str]:
    """Runs under the root: directories that hold rollouts, steps or checkpoints."""
    if not store.call("list runs", lambda: store.fs.exists(store.root)):
        return []
    entries = store.call("list runs", lambda: store.fs.ls(store.root, detail=True))
    runs = []
    for e in entries:
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if e["type"] == "directory" and not name.startswith((".", "_")):
            runs.append(name)
    return sorted(runs)


def require_run(store: Store, run: str) -> None:
    """Raise NotFoundError naming the run and listing those that exist."""
    layout.check_name("run", run)
    if not store.call(f"find run {run}", lambda: store.fs.isdir(store.path(run))):
        runs = list_runs(store)
        raise NotFoundError(
            f"run {run!r} not found under {store.display}; "
            + (f"runs there: {', '.join(runs)}" if runs else "there are no runs there yet")
        )


def list_steps(store: Store, run: str) -> list[int]:
    """Steps of a run that have at least one complete shard, ascending."""
    require_run(store, run)
    files = store.call("list shards", lambda: store.fs.glob(store.path(layout.GLOBS["rollouts"].format(run=run))))
    return sorted({int(m.group(1)) for f in files if (m := layout.STEP_RE.search(f))})


def shard_paths(store: Store, run: str, step: int) -> list[str]:
    """Paths of the complete shards of one step; NotFoundError if there are none."""
    pattern = store.path(layout.step_dir(run, step), "*.parquet")
    paths = sorted(store.call("list shards", lambda: store.fs.glob(pattern)))
    if not paths:
        steps = list_steps(store, run)
        raise NotFoundError(
            f"step {step} of run {run!r} has no shards under {store.display}; "
            + (f"steps there: {_ranges(steps)}" if steps else "the run has no rollouts yet")
        )
    return paths


def read_step(store: Store, run: str, step: int) -> pa.Table:
    """All episodes of one step (every shard), as one table."""
    return pa.concat_tables([read_table(store, p) for p in shard_paths(store, run, step)])


def shard_exists(store: Store, run: str, step: int, shard: str) -> bool:
    path = store.path(layout.rollout_shard(run, step, shard))
    return store.call("check shard", lambda: store.fs.exists(path))


def _ranges(values: list[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2, 5, 7-8' so long listings stay readable."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)
