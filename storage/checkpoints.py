"""Weight-version registry: which weights exist, which is newest, which to drop.

A publisher first writes the weights completely (under `weights_dir`), then
publishes a one-row record; the record is the commit marker. A publisher that dies
before the record leaves weights nobody points to (removed by `prune`), never a
record that points to missing weights. Retention deletes the record first, then
the weights, so a reader never follows a record to deleted files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from storage import layout
from storage.errors import CorruptFileError, NotFoundError
from storage.fs import Store
from storage.parquet_io import read_table, write_table
from storage.schema import CHECKPOINTS

_VERSION_RE = re.compile(r"/version=(\d+)/record\.parquet$")
_WEIGHTS_RE = re.compile(r"/v(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    run_id: str
    version: int
    step: int
    uri: str
    format: str
    created_at: datetime


def weights_uri(store: Store, run: str, version: int) -> str:
    """Where the weights of `version` should be written (local path or s3:// URL)."""
    return store.url(layout.weights_dir(run, version))


def publish(store: Store, run: str, version: int, step: int, uri: str, fmt: str = "safetensors") -> Checkpoint:
    """Make a completely written weight version visible. Idempotent for the same version.

    Refuses a `uri` on this store that does not exist, so a record never points to
    weights that were not written first."""
    local_path = _path_on_store(store, uri)
    if local_path is not None and not store.call(f"check {uri}", lambda: store.fs.exists(local_path)):
        raise NotFoundError(
            f"weights of version {version} of run {run!r} are not at {uri}; "
            "write them completely (see weights_uri) before publishing"
        )
    ckpt = Checkpoint(run, int(version), int(step), uri, fmt, datetime.now(UTC))
    table = pa.Table.from_pylist([ckpt.__dict__], schema=CHECKPOINTS)
    write_table(store, layout.checkpoint_record(run, version), table, "checkpoints")
    return ckpt


def list_versions(store: Store, run: str) -> list[int]:
    pattern = store.path(layout.GLOBS["checkpoints"].format(run=run))
    files = store.call("list checkpoints", lambda: store.fs.glob(pattern))
    return sorted(int(m.group(1)) for f in files if (m := _VERSION_RE.search(f)))


def get(store: Store, run: str, version: int) -> Checkpoint:
    path = store.path(layout.checkpoint_record(run, version))
    try:
        row = read_table(store, path).to_pylist()[0]
    except FileNotFoundError:
        versions = list_versions(store, run)
        raise NotFoundError(
            f"weight version {version} of run {run!r} is not published; published: {versions or 'none'}"
        ) from None
    return Checkpoint(**row)


def latest(store: Store, run: str) -> Checkpoint | None:
    """Newest readable published version, or None when nothing is published."""
    for version in reversed(list_versions(store, run)):
        try:
            return get(store, run, version)
        except CorruptFileError:
            continue  # a damaged record must not hide older good ones
    return None


def retain(store: Store, run: str, keep_last: int) -> list[int]:
    """Keep the newest `keep_last` versions; delete older records, then their weights."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    dropped = list_versions(store, run)[:-keep_last]
    for version in dropped:
        drop(store, run, version)
    prune(store, run)
    return dropped


def drop(store: Store, run: str, version: int) -> None:
    """Delete one version: its record first (readers stop seeing it), then its weights."""
    record_dir = store.path(layout.checkpoint_record(run, version)).rsplit("/", 1)[0]
    _rm_if_exists(store, record_dir)
    _rm_if_exists(store, store.path(layout.weights_dir(run, version)))


def prune(store: Store, run: str) -> list[int]:
    """Delete weight directories that no record points to (a publisher died half-way),
    older than the newest published version so an in-progress publish is left alone."""
    published = list_versions(store, run)
    if not published:
        return []
    base = store.path(check_run(run), "weights")
    if not store.call("list weights", lambda: store.fs.exists(base)):
        return []
    removed = []
    for entry in store.call("list weights", lambda: store.fs.ls(base, detail=False)):
        m = _WEIGHTS_RE.search(entry.rstrip("/"))
        if m and int(m.group(1)) not in published and int(m.group(1)) < published[-1]:
            _rm_if_exists(store, entry)
            removed.append(int(m.group(1)))
    return removed


def _path_on_store(store: Store, uri: str) -> str | None:
    """The filesystem path of `uri` when it lives on `store`'s filesystem, else None."""
    if store.protocol == "file":
        return None if "://" in uri and not uri.startswith("file://") else uri.removeprefix("file://")
    prefix = f"{store.protocol}://"
    return uri[len(prefix) :] if uri.startswith(prefix) else None


def check_run(run: str) -> str:
    return layout.check_name("run", run)


def _rm_if_exists(store: Store, path: str) -> None:
    if store.call("check", lambda: store.fs.exists(path)):
        store.call("delete", lambda: store.fs.rm(path, recursive=True))
