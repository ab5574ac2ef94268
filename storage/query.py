"""DuckDB over the lake: one connection, a typed view per table.

    con = connect(open_store("runs"), run="my-run")
    con.sql("SELECT step, avg(reward) FROM rollouts GROUP BY step").show()

Views are built over an explicit list of complete files whose footers were
checked, so a corrupt file is reported by name (in `skipped`) and every other
file stays queryable. Lake-level tables (`experiments`) are in every connection, with or
without a run. S3 goes through s3fs registered as a DuckDB filesystem:
the httpfs extension is never needed nor downloaded.

Partition keys come from the folder names (hive partitioning, typed BIGINT); in
files written before schema version 2 the same key is also a column, which the
folder's value shadows. Columns come in the schema's order, and columns that no
file has yet (added in a later schema version) are typed nulls.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from storage.errors import CorruptFileError, SchemaVersionError
from storage.fs import Store
from storage.layout import GLOBS, LAKE_GLOBS
from storage.parquet_io import read_footer_version
from storage.partition import PARTITION_KEYS
from storage.schema import SCHEMA_VERSION, SCHEMAS, VERSION_KEY, check_version
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
    """Views of every run table (`rollouts`, `steps`, `tasks`, `checkpoints`, `runs`, `rescores`,
    `advantages`, `evaluations`) over one run or all runs, and of the lake's `experiments`."""
    if run is not None:
        require_run(store, run)
    con = duckdb.connect()
    # Fail fast instead of trying to download extensions on a closed network.
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
    # Footers read once (the version check below) serve every later scan of the connection.
    con.execute("SET parquet_metadata_cache=true")
    if store.protocol != "file":
        con.register_filesystem(store.fs)
    lake = LakeConnection(con)
    # One listing and one footer read for every table: on S3 a listing is a paginated
    # request, and each DuckDB call has a fixed cost; per table they were most of the
    # time of a small query.
    tables = _table_files(store, run)
    versions = _complete_files(con, store, sorted(f for files in tables.values() for f in files), lake.skipped)
    for kind, files in tables.items():
        urls = {u: versions[u] for u in map(store.full_url, files) if u in versions}
        _create_view(con, kind, list(urls), mixed=any(v != SCHEMA_VERSION for v in urls.values()))
    return lake


def _table_files(store: Store, run: str | None) -> dict[str, list[str]]:
    """Each table's files (paths), from one listing of the run, or of every run (which
    holds the lake-level tables too; with a run they take a second listing)."""
    found = store.call("list files", lambda: store.fs.find(store.path(run or "")))
    if run is not None:
        lake_dirs = {glob.split("/", 1)[0] for glob in LAKE_GLOBS.values()}
        for folder in sorted(lake_dirs):
            found = [*found, *store.call("list files", lambda f=folder: store.fs.find(store.path(f)))]
    relative = [(f, f[len(store.root) :]) for f in sorted(found)]
    globs = {**{kind: glob.format(run=run or "*") for kind, glob in GLOBS.items()}, **LAKE_GLOBS}
    tables = {}
    for kind, glob in globs.items():
        # A glob's `*` stands for one path segment.
        pattern = re.compile("/" + "[^/]+".join(map(re.escape, glob.split("*"))))
        tables[kind] = [f for f, rel in relative if pattern.fullmatch(rel)]
    return tables


def _complete_files(
    con: duckdb.DuckDBPyConnection, store: Store, files: list[str], skipped: dict[str, str]
) -> dict[str, int]:
    """Readable files among `files` (URL -> schema version); the others go to `skipped`.

    One DuckDB call reads every footer's version (in parallel, and kept in the
    connection's metadata cache, so the views' scans do not read the footers again);
    only when some file is unreadable are they checked one by one to name it."""
    urls = [store.full_url(f) for f in files]
    if not urls:
        return {}
    try:
        found = dict(
            con.execute(
                "SELECT file_name, decode(value) FROM parquet_kv_metadata($1) WHERE decode(key) = $2",
                [urls, VERSION_KEY.decode()],
            ).fetchall()
        )
    except duckdb.Error:
        return _checked_one_by_one(store, files, skipped)
    good = {}
    for url in urls:
        raw = found.get(url)
        try:
            good[url] = check_version({VERSION_KEY: raw.encode()} if raw else None, url)
        except SchemaVersionError as exc:
            _skip(skipped, url, str(exc))
    return good


def _checked_one_by_one(store: Store, files: list[str], skipped: dict[str, str]) -> dict[str, int]:
    def check(path: str) -> int | str:
        try:
            return read_footer_version(store, path)
        except (CorruptFileError, SchemaVersionError) as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=8 if store.protocol != "file" else 2) as pool:
        results = list(pool.map(check, files))
    good = {}
    for path, result in zip(files, results):
        if isinstance(result, int):
            good[store.full_url(path)] = result
        else:
            _skip(skipped, store.full_url(path), result)
    return good


def _skip(skipped: dict[str, str], url: str, reason: str) -> None:
    skipped[url] = reason
    log.warning("left out of the views: %s", reason)


def _create_view(con: duckdb.DuckDBPyConnection, kind: str, urls: list[str], mixed: bool) -> None:
    """`mixed`: some files are of an older schema version (other columns)."""
    if not urls or mixed:
        # An empty table of the current schema: alone it makes an empty view whose
        # queries still bind; first in a union by name it fixes the column order and
        # types the columns older files lack.
        con.register(f"_empty_{kind}", pa.Table.from_batches([], schema=SCHEMAS[kind]))
    if not urls:
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM _empty_{kind}")
        return
    listing = ", ".join("'" + u.replace("'", "''") + "'" for u in urls)
    key = PARTITION_KEYS.get(kind)
    hive = f"hive_partitioning=true, hive_types={{'{key}': BIGINT}}" if key else "hive_partitioning=false"
    if mixed:
        con.execute(
            f"CREATE VIEW {kind} AS SELECT * FROM _empty_{kind} UNION ALL BY NAME "
            f"SELECT * FROM read_parquet([{listing}], {hive}, union_by_name=true)"
        )
        return
    # Every file has the current columns: a plain scan (union_by_name would read every
    # footer again), the hive key put back at its place in the schema.
    columns = ", ".join(f'"{name}"' for name in SCHEMAS[kind].names)
    con.execute(f"CREATE VIEW {kind} AS SELECT {columns} FROM read_parquet([{listing}], {hive})")
