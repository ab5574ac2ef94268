"""The `runs` table: one row per start of a run, written before the run does anything
else, so a run is reproducible from its lake alone: the resolved configuration, the
code version, the task corpus's identity and, for replays, the run whose stored
trajectories it reuses.

Rows are only added (`start-0000`, `start-0001`, ...), never rewritten: a resumed run
keeps the record of every earlier start. Values are plain strings and numbers; what
they mean (how a config is compared, how a code version is found) is decided above
storage.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from storage import layout
from storage.errors import CorruptFileError
from storage.fs import Store
from storage.parquet_io import read_table, write_table
from storage.schema import RUNS

_START_RE = re.compile(r"/start-(\d+)\.parquet$")


def list_starts(store: Store, run: str) -> list[int]:
    pattern = store.path(layout.GLOBS["runs"].format(run=layout.check_name("run", run)))
    files = store.call("list starts", lambda: store.fs.glob(pattern))
    return sorted(int(m.group(1)) for f in files if (m := _START_RE.search(f)))


def latest_start(store: Store, run: str) -> dict[str, Any] | None:
    """The newest readable start record of `run` as a dict, or None for a new run."""
    for start in reversed(list_starts(store, run)):
        try:
            return read_table(store, store.path(layout.run_start(run, start))).to_pylist()[0]
        except CorruptFileError:
            continue  # a damaged record must not hide the one before it
    return None


def record_start(store: Store, run: str, record: dict[str, Any]) -> dict[str, Any]:
    """Add a start row for `run` (columns of storage.schema.RUNS; run_id, start and
    started_at are filled in). Returns the row written."""
    unknown = sorted(set(record) - set(RUNS.names))
    if unknown:
        raise ValueError(f"runs: unknown columns {unknown}; allowed: {RUNS.names}")
    starts = list_starts(store, run)
    start = starts[-1] + 1 if starts else 0
    row = {**record, "run_id": run, "start": start, "started_at": datetime.now(UTC)}
    write_table(store, layout.run_start(run, start), pa.Table.from_pylist([row], schema=RUNS), "runs")
    return row
