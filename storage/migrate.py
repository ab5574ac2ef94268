"""Rewrite a lake's files in the current schema version.

Files of schema version 1 hold their partition key (`step`, `version`) both in the
folder name and as a column, which pandas, pyarrow and polars refuse to merge; they
also lack columns added since. Every project reader handles them as they are, and
`migrate` rewrites them for everyone else: each file is read, conformed to the
current schema and written back atomically under the same name, so an interrupted
migration leaves every file either old or new, and running it again finishes it.
Files already current are not touched; corrupt files are reported and left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.errors import CorruptFileError
from storage.fs import Store
from storage.layout import GLOBS, LAKE_GLOBS
from storage.parquet_io import read_footer_version, read_table, write_table
from storage.schema import SCHEMA_VERSION
from storage.shards import list_runs, require_run


@dataclass
class MigrationReport:
    rewritten: list[str] = field(default_factory=list)  # file URLs
    current: int = 0  # files already at SCHEMA_VERSION
    failed: dict[str, str] = field(default_factory=dict)  # file URL -> reason


def migrate(store: Store, run: str | None = None) -> MigrationReport:
    """Bring every table file of `run` (default: every run, and the lake-level tables)
    to SCHEMA_VERSION."""
    if run is not None:
        require_run(store, run)
    report = MigrationReport()
    globs = [(kind, glob.format(run=r)) for r in ([run] if run else list_runs(store)) for kind, glob in GLOBS.items()]
    if run is None:
        globs += list(LAKE_GLOBS.items())
    for kind, glob in globs:
        pattern = store.path(glob)
        for path in sorted(store.call("list files", lambda: store.fs.glob(pattern))):
            _migrate_file(store, path, kind, report)
    return report


def _migrate_file(store: Store, path: str, kind: str, report: MigrationReport) -> None:
    try:
        if read_footer_version(store, path) >= SCHEMA_VERSION:
            report.current += 1
            return
        table = read_table(store, path)
    except CorruptFileError as exc:
        report.failed[store.full_url(path)] = str(exc)
        return
    relpath = path[len(store.root) + 1 :]
    write_table(store, relpath, table, kind)
    report.rewritten.append(store.full_url(path))
