"""DuckDB over the lake: one connection, a typed view per table.

    con = connect(open_store("runs"), run="my-run")
    con.sql("SELECT step, avg(reward) FROM rollouts GROUP BY step").show()

Views are built over an explicit list of complete files whose footers were
checked, so a corrupt file is reported by name (in `skipped`) and every other
file stays queryable. S3 goes through s3fs registered as a DuckDB filesystem:
the httpfs extension is never needed nor downloaded.

Partition keys come from the folder names (hive partitioning, typed BIGINT); in
files written before schema version 2 the same key is also a column, which the
folder's value shadows. Columns come in the schema's order, and columns that no
file has yet (added in a later schema version) are typed nulls.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from storage.errors import CorruptFileError, SchemaVersionError
from storage.fs import Store
from storage.layout import GLOBS
from storage.parquet_io import check_footer
from storage.partition import PARTITION_KEYS
from storage.schema import SCHEMAS
from storage.shards import require_run

log = logging.getLogger(__name__)


@dataclass
class LakeConnection:
    """A DuckDB connection plus what was left out of its views and why."""

    con: duckdb.DuckDBPyConnection
    skipped: dict[str, str] = field(default_factory=dict)  # file URL -> reason

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query)


def connect(store: Store, run: str | None = None) -> LakeConnection:
    """Views `rollouts`, `steps`, `tasks`, `checkpoints`, `runs`, `rescores` over one run or all runs."""
    if run is not None:
        require_run(store, run)
    con = duckdb.connect()
    # Fail fast instead of trying to download extensions on a closed network.
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
    if store.protocol != "file":
        con.register_filesystem(store.fs)
    lake = LakeConnection(con)
    for kind, glob in GLOBS.items():
        files = _complete_files(store, store.path(glob.format(run=run or "*")), lake.skipped)
        _create_view(con, kind, [store.full_url(f) for f in files])
    return lake


def _complete_files(store: Store, pattern: str, skipped: dict[str, str]) -> list[str]:
    files = sorted(store.call("list files", lambda: store.fs.glob(pattern)))

    def check(path: str) -> str | None:
        try:
            check_footer(store, path)
            return None
        except (CorruptFileError, SchemaVersionError) as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=8 if store.protocol != "file" else 2) as pool:
        problems = list(pool.map(check, files))
    good = []
    for path, problem in zip(files, problems):
        if problem is None:
            good.append(path)
        else:
            skipped[store.full_url(path)] = problem
            log.warning("left out of the views: %s", problem)
    return good


def _create_view(con: duckdb.DuckDBPyConnection, kind: str, urls: list[str]) -> None:
    # An empty table of the current schema: alone it makes an empty view whose queries
    # still bind; first in a union by name it fixes the column order and types the
    # columns older files lack.
    con.register(f"_empty_{kind}", pa.Table.from_batches([], schema=SCHEMAS[kind]))
    if not urls:
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM _empty_{kind}")
        return
    listing = ", ".join("'" + u.replace("'", "''") + "'" for u in urls)
    key = PARTITION_KEYS.get(kind)
    hive = f"hive_partitioning=true, hive_types={{'{key}': BIGINT}}" if key else "hive_partitioning=false"
    con.execute(
        f"CREATE VIEW {kind} AS SELECT * FROM _empty_{kind} UNION ALL BY NAME "
        f"SELECT * FROM read_parquet([{listing}], {hive}, union_by_name=true)"
    )
