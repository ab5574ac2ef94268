"""Damaged and too-new files are named, refused, and never hide the other shards."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import query, shards
from storage.errors import CorruptFileError, SchemaVersionError
from storage.fs import open_store
from storage.schema import ROLLOUTS, SCHEMA_VERSION, VERSION_KEY, conform
from tests.storage.conftest import make_episodes


def test_a_truncated_or_garbage_file_is_named_and_the_rest_stays_queryable(lake_root: str) -> None:
    store = open_store(lake_root)
    for step in range(3):
        shards.write_shard(store, "r", step, "w0", make_episodes("r", step, 10))
    truncated = store.path("r/rollouts/step=1/w0.parquet")
    store.fs.pipe_file(truncated, store.fs.cat_file(truncated)[:-100])
    garbage = store.path("r/rollouts/step=2/w1.parquet")
    store.fs.pipe_file(garbage, b"not parquet at all")

    with pytest.raises(
        CorruptFileError, match=f"{store.url('r/rollouts/step=1/w0.parquet')} is not a readable Parquet file"
    ):
        shards.read_step(store, "r", 1)
    with pytest.raises(CorruptFileError, match="step=2/w1.parquet is not a readable Parquet file"):
        shards.read_step(store, "r", 2)
    assert shards.read_step(store, "r", 0).num_rows == 10

    lake = query.connect(store, "r")
    assert sorted(lake.skipped) == [
        store.url("r/rollouts/step=1/w0.parquet"),
        store.url("r/rollouts/step=2/w1.parquet"),
    ]
    assert lake.sql("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step").fetchall() == [(0, 10), (2, 10)]


def test_a_file_from_a_newer_schema_version_is_refused(lake_root: str) -> None:
    store = open_store(lake_root)
    shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 4))
    table = conform(make_episodes("r", 1, 4), "rollouts")
    newer = table.replace_schema_metadata({**ROLLOUTS.metadata, VERSION_KEY: str(SCHEMA_VERSION + 1).encode()})
    store.fs.makedirs(store.path("r/rollouts/step=1"), exist_ok=True)
    with store.fs.open(store.path("r/rollouts/step=1/w0.parquet"), "wb") as f:
        pq.write_table(newer, f)

    message = rf"step=1/w0.parquet was written with schema version {SCHEMA_VERSION + 1}, newer than this tandem-rl understands \({SCHEMA_VERSION}\). Upgrade tandem-rl"
    with pytest.raises(SchemaVersionError, match=message):
        shards.read_step(store, "r", 1)
    lake = query.connect(store, "r")
    assert list(lake.skipped) == [store.url("r/rollouts/step=1/w0.parquet")]
    assert "Upgrade tandem-rl" in lake.skipped[store.url("r/rollouts/step=1/w0.parquet")]
    assert lake.sql("SELECT count(*) FROM rollouts").fetchall() == [(4,)]


def test_a_file_written_without_tandem_metadata_is_read_as_version_zero(tmp_path) -> None:
    store = open_store(str(tmp_path))
    plain = pa.Table.from_pylist([{"run_id": "r", "step": 0, "task_id": "t"}])
    (tmp_path / "r/rollouts/step=0").mkdir(parents=True)
    pq.write_table(plain, tmp_path / "r/rollouts/step=0/external.parquet")
    assert shards.read_step(store, "r", 0).to_pylist() == plain.to_pylist()
