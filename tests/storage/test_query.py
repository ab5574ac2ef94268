"""DuckDB views over one run and over all runs, typed, on local disk and on S3
without the httpfs extension; and the files stay readable with no tandem code."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage import checkpoints, query, shards, tables
from storage.atomic import write_bytes_atomic
from storage.fs import open_store
from tests.storage.conftest import make_episodes

EXPECTED_TYPES = {
    "step": "BIGINT",
    "policy_versions": "BIGINT[]",
    "prompt_ids": "INTEGER[]",
    "completion_ids": "INTEGER[]",
    "loss_mask": "BOOLEAN[]",
    "completion_logprobs": "FLOAT[]",
    "routed_experts": "BLOB",
    "reward": "DOUBLE",
    "resolved": "BOOLEAN",
    "finish_reason": "VARCHAR",
    "env_name": "VARCHAR",
    "started_at": "TIMESTAMP WITH TIME ZONE",
}


def fill_two_runs(root: str) -> None:
    store = open_store(root)
    for run, steps in (("a", 3), ("b", 2)):
        for step in range(steps):
            shards.write_shard(store, run, step, "w0", make_episodes(run, step, 5, seed=step))
            tables.write_step_metrics(store, run, step, {"reward_mean": step / 10})
    write_bytes_atomic(store, "a/weights/v1/model.safetensors", b"w")
    checkpoints.publish(store, "a", 1, 0, checkpoints.weights_uri(store, "a", 1))


def column_types(lake: query.LakeConnection, view: str) -> dict[str, str]:
    return {name: type_ for name, type_, *_ in lake.sql(f"DESCRIBE {view}").fetchall()}


def test_views_over_one_run_and_all_runs_are_typed(lake_root: str) -> None:
    fill_two_runs(lake_root)
    store = open_store(lake_root)
    one = query.connect(store, "a")
    assert column_types(one, "rollouts").items() >= EXPECTED_TYPES.items()
    assert one.sql("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step").fetchall() == [
        (0, 5),
        (1, 5),
        (2, 5),
    ]
    assert one.sql("SELECT step, reward_mean FROM steps ORDER BY step").fetchall() == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert one.sql("SELECT version, step FROM checkpoints").fetchall() == [(1, 0)]
    assert one.sql("SELECT count(*) FROM tasks").fetchall() == [(0,)]  # no corpus written: empty but typed
    assert column_types(one, "tasks")["FAIL_TO_PASS"] == "VARCHAR[]"

    every = query.connect(store)
    assert every.sql("SELECT run_id, count(*) FROM rollouts GROUP BY run_id ORDER BY run_id").fetchall() == [
        ("a", 15),
        ("b", 10),
    ]
    assert every.sql("SELECT count(*) FROM checkpoints").fetchall() == [(1,)]
    assert column_types(every, "rollouts") == column_types(one, "rollouts")
    assert every.skipped == {}


def test_connections_never_install_extensions(lake_root: str) -> None:
    fill_two_runs(lake_root)
    lake = query.connect(open_store(lake_root), "b")
    assert lake.sql("SELECT current_setting('autoinstall_known_extensions')").fetchall() == [(False,)]
    assert lake.sql("SELECT count(*) FROM rollouts").fetchall() == [(10,)]
    loaded = lake.sql("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()
    assert ("httpfs",) not in loaded


def test_an_empty_root_gives_empty_typed_views(tmp_path) -> None:
    lake = query.connect(open_store(str(tmp_path / "nothing-yet")))
    assert lake.sql("SELECT count(*) FROM rollouts").fetchall() == [(0,)]
    assert column_types(lake, "rollouts").items() >= EXPECTED_TYPES.items()


def test_local_files_are_readable_by_plain_pyarrow_pandas_and_duckdb(tmp_path) -> None:
    root = tmp_path / "lake"
    fill_two_runs(str(root))
    shard = root / "a/rollouts/step=1/w0.parquet"
    table = pq.read_table(shard)
    assert table.num_rows == 5 and table.schema.field("completion_ids").type.value_type.bit_width == 32
    assert pq.read_schema(shard).field("loss_mask").metadata[b"doc"].startswith(b"per completion token")
    frame = pd.read_parquet(shard)
    assert list(frame["sample_index"]) == list(range(5))
    rows = duckdb.sql(
        f"SELECT run_id, count(*) FROM read_parquet('{root}/*/rollouts/*/*.parquet', hive_partitioning=false) GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert rows == [("a", 15), ("b", 10)]


def test_s3_files_are_readable_by_plain_pyarrow(s3_server: dict[str, str], s3_bucket: str) -> None:
    fill_two_runs(f"s3://{s3_bucket}/lake")
    endpoint = s3_server["AWS_ENDPOINT_URL"]
    s3 = pafs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", region="us-east-1", access_key="testing", secret_key="testing"
    )
    table = pq.read_table(f"{s3_bucket}/lake/b/rollouts", filesystem=s3)  # the step comes from the folder names
    assert sorted(table.column("step").to_pylist()) == [0] * 5 + [1] * 5
