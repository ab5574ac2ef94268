"""Hive partition keys live in the folder names only (`step=3/`), never in the files.

Readers that merge the path's keys with the file's columns (pandas, pyarrow's
`pq.read_table`, polars) refuse a column that is in both with different types
(`int64 vs dictionary<...>`), so files written since schema version 2 leave the key
out and every reader of this project puts it back from the path. Version-1 files
still hold the key; it equals the folder's value (the shard writer checks), so a
read leaves it as it is and `tandem lake migrate` rewrites them.
"""

from __future__ import annotations

import re

import pyarrow as pa

from storage.schema import SCHEMAS

# table -> its partition key; tables not named here are not partitioned.
PARTITION_KEYS: dict[str, str] = {
    "rollouts": "step",
    "steps": "step",
    "checkpoints": "version",
    "rescores": "step",
    "advantages": "step",
    "evaluations": "version",
}


def key_value(kind: str, path: str) -> int | None:
    """The partition value that `path` names for a table of `kind` (None if unpartitioned)."""
    key = PARTITION_KEYS.get(kind)
    if key is None:
        return None
    m = re.search(rf"(?:^|/){key}=(\d+)/", path)
    if m is None:
        raise ValueError(f"{path}: a {kind} file must sit in a {key}=<n>/ folder")
    return int(m.group(1))


def strip_key(table: pa.Table, kind: str, path: str) -> pa.Table:
    """`table` without its partition column, after checking every row agrees with `path`."""
    value = key_value(kind, path)
    key = PARTITION_KEYS.get(kind)
    if value is None or key not in table.column_names:
        return table
    wrong = set(table.column(key).to_pylist()) - {value}
    if wrong:
        raise ValueError(
            f"{path}: column {key!r} holds {sorted(wrong, key=str)[:5]} but the file is for {key} {value}; "
            f"write each {key} to its own {key}=<n>/ folder"
        )
    return table.drop_columns([key])


def restore_key(table: pa.Table, kind: str, path: str) -> pa.Table:
    """`table` with its partition column from `path`, at its place in the schema."""
    value = key_value(kind, path)
    key = PARTITION_KEYS.get(kind)
    if value is None or key in table.column_names:
        return table
    field = SCHEMAS[kind].field(key)
    index = min(SCHEMAS[kind].get_field_index(key), table.num_columns)
    return table.add_column(index, field, pa.array([value] * table.num_rows, field.type))
