"""Parquet files in and out of a `Store`: atomic writes, checked reads."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from storage.atomic import write_bytes_atomic
from storage.errors import CorruptFileError
from storage.fs import Store
from storage.partition import restore_key, strip_key
from storage.schema import SCHEMAS, TABLE_KEY, check_version, conform

# zstd: 3-5x smaller than snappy on token ids at similar decode speed.
_WRITE_OPTS = dict(compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True)


def write_table(store: Store, relpath: str, table: pa.Table, kind: str) -> str:
    """Conform `table` to the schema of `kind` and write it atomically to `relpath`.
    A partition key (`step`, `version`) is checked against `relpath` and left out of
    the file (storage/partition.py)."""
    table = strip_key(conform(table, kind), kind, relpath)
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=8192, **_WRITE_OPTS)
    write_bytes_atomic(store, relpath, buf.getvalue())
    return store.url(relpath)


def read_table(store: Store, path: str) -> pa.Table:
    """Read one file written by `write_table`, in the current schema of its table: the
    partition key put back from the path, columns added since it was written as nulls.
    Names the file on any failure."""
    data = store.call(f"read {path}", lambda: store.fs.cat_file(path))
    try:
        table = pq.read_table(io.BytesIO(data))
    except pa.ArrowException as exc:
        raise _corrupt(store, path, exc) from exc
    check_version(table.schema.metadata, store.full_url(path))
    kind = (table.schema.metadata or {}).get(TABLE_KEY, b"").decode()
    if kind not in SCHEMAS:
        return table
    return conform(restore_key(table, kind, path), kind)


def read_footer_version(store: Store, path: str) -> int:
    """Read only the footer: cheap proof that a file is complete Parquet of a known
    version, which it returns; CorruptFileError or SchemaVersionError if unusable."""

    def read_footer() -> pq.FileMetaData:
        with store.fs.open(path, "rb") as f:
            return pq.read_metadata(f)

    try:
        meta = store.call(f"read footer of {path}", read_footer)
    except pa.ArrowException as exc:
        raise _corrupt(store, path, exc) from exc
    return check_version(meta.metadata, store.full_url(path))


def _corrupt(store: Store, path: str, exc: Exception) -> CorruptFileError:
    return CorruptFileError(
        f"{store.full_url(path)} is not a readable Parquet file ({exc}). "
        "Delete it (its step can be regenerated) or restore it from a copy."
    )
