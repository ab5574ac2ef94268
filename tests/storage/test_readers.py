"""Every table of the lake opens with other tools' defaults, no tandem code and no
options: pandas, pyarrow (parquet and dataset), polars and DuckDB, on local disk and
on the moto S3 server. Also: a lake written before the partition key left the files
(schema version 1) stays readable here and `migrate` makes it readable everywhere."""

from __future__ import annotations

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from storage import checkpoints, query, runs, shards, tables
from storage.atomic import write_bytes_atomic
from storage.fs import open_store
from storage.migrate import migrate
from storage.schema import ADVANTAGES, RESCORES, TASKS, VERSION_KEY
from tests.storage.conftest import make_episodes

RUN = "r1"
# table -> (rows written, partition key or None, the key's values)
EXPECTED = {
    "rollouts": (6, "step", [0, 0, 0, 1, 1, 1]),
    "steps": (2, "step", [0, 1]),
    "tasks": (1, None, []),
    "checkpoints": (2, "version", [0, 1]),
    "runs": (1, None, []),
    "rescores": (3, "step", [1, 1, 1]),
    "advantages": (2, "step", [1, 1]),
    "evaluations": (2, "version", [1, 1]),
}


def fill_every_table(root: str) -> None:
    store = open_store(root)
    for step in range(2):
        shards.write_shard(store, RUN, step, "final", make_episodes(RUN, step, 3, seed=step))
        tables.write_step_metrics(store, RUN, step, {"reward_mean": 0.5, "lr": 1e-3})
    for version in (0, 1):
        write_bytes_atomic(store, f"{RUN}/weights/v{version}/model.safetensors", b"w")
        checkpoints.publish(store, RUN, version, version - 1, checkpoints.weights_uri(store, RUN, version))
    task = {"instance_id": "t1", "FAIL_TO_PASS": ["test_a"], "PASS_TO_PASS": [], "env_name": "micro", "split": "train"}
    tables.write_tasks(store, RUN, pa.Table.from_pylist([task], schema=TASKS))
    runs.record_start(store, RUN, {"kind": "rl", "config": "{}", "code_version": "git:abc"})
    rescored = [
        {"run_id": RUN, "step": 1, "source_run": "src", "reward": 1.0, "stored_reward": 1.0, "agrees": True}
    ] * 3
    tables.write_rescores(store, RUN, 1, pa.Table.from_pylist(rescored, schema=RESCORES))
    trained = [
        {"run_id": RUN, "step": 1, "group_id": "g", "sample_index": i, "reward": float(i), "advantage": i - 0.5}
        for i in range(2)
    ]
    tables.write_advantages(store, RUN, 1, pa.Table.from_pylist(trained, schema=ADVANTAGES))
    evaluated = [{"pass": "greedy", "task_id": f"t{i}", "resolved": bool(i)} for i in range(2)]
    tables.write_evaluations(store, RUN, 1, "after", pa.Table.from_pylist(evaluated))
    tables.append_experiment(store, {"name": "lab", "settings": "{}", "figures": "{}", "wall_s": 1.0})


def read_with_every_reader(url: str, s3: bool) -> dict[str, pd.DataFrame]:
    """reader -> what it read from a table's folder, as a pandas frame."""
    out = {"pandas": pd.read_parquet(url)}
    out["pyarrow.parquet"] = pq.read_table(url).to_pandas()
    out["pyarrow.dataset"] = ds.dataset(url).to_table().to_pandas()
    out["polars"] = pl.read_parquet(url + "/").to_pandas()  # polars takes a cloud folder with its slash
    con = duckdb.connect()
    if s3:  # DuckDB reaches S3 through its httpfs extension, which this network cannot download
        import s3fs

        con.register_filesystem(s3fs.S3FileSystem())
    out["duckdb"] = con.sql(f"SELECT * FROM read_parquet('{url}/**/*.parquet')").df()
    return out


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_every_table_opens_with_every_reader_s_defaults(where: str, tmp_path, request) -> None:
    root = str(tmp_path / "lake") if where == "local" else f"s3://{request.getfixturevalue('s3_bucket')}/lake"
    fill_every_table(root)
    for table, (rows, key, values) in EXPECTED.items():
        frames = read_with_every_reader(f"{root}/{RUN}/{table}", where == "s3")
        for reader, frame in frames.items():
            what = f"{reader} reading {table}"
            assert len(frame) == rows, what
            ident = "instance_id" if table == "tasks" else "run_id"  # the corpus table has no run column
            assert set(frame[ident]) == ({"t1"} if table == "tasks" else {RUN}), what
            if key is None:
                continue
            if reader == "pyarrow.dataset":  # takes folder names as keys only when asked (partitioning="hive")
                assert key not in frame.columns, what
                continue
            assert sorted(int(v) for v in frame[key]) == values, what
    for reader, frame in read_with_every_reader(f"{root}/_experiments", where == "s3").items():
        assert list(frame["name"]) == ["lab"], f"{reader} reading experiments"


def _as_version_1(root: str) -> None:
    """Rewrite every partitioned file the way schema version 1 did: key in the file too."""
    store = open_store(root)
    for path in store.fs.glob(f"{store.root}/{RUN}/*/*=*/*.parquet"):
        table = pq.read_table(path)  # a single file: no key from the path
        kind = table.schema.metadata[b"tandem.table"].decode()
        key = {"checkpoints": "version", "evaluations": "version"}.get(kind, "step")
        value = int(path.split(f"/{key}=")[1].split("/")[0])
        table = table.append_column(pa.field(key, pa.int64()), pa.array([value] * table.num_rows, pa.int64()))
        if "patch" in table.column_names:
            table = table.drop_columns(["patch"])  # added in version 2
        table = table.replace_schema_metadata({**table.schema.metadata, VERSION_KEY: b"1"})
        pq.write_table(table, path)


def test_a_version_1_lake_is_read_here_and_migrated_for_everyone(tmp_path) -> None:
    root = str(tmp_path / "lake")
    fill_every_table(root)
    _as_version_1(root)
    with pytest.raises(pa.ArrowTypeError, match="step"):
        pd.read_parquet(f"{root}/{RUN}/rollouts")  # what a user met before
    store = open_store(root)
    lake = query.connect(store, RUN)
    assert lake.sql("SELECT step, count(*), count(patch) FROM rollouts GROUP BY step ORDER BY step").fetchall() == [
        (0, 3, 0),
        (1, 3, 0),
    ]
    assert checkpoints.latest(store, RUN).version == 1 and shards.read_step(store, RUN, 1).num_rows == 3

    report = migrate(store)
    # rollouts, steps, checkpoints, rescores, advantages, evaluations
    assert len(report.rewritten) == 2 + 2 + 2 + 1 + 1 + 1 and report.failed == {}
    assert migrate(store).rewritten == []  # idempotent: current files are left alone
    assert sorted(pd.read_parquet(f"{root}/{RUN}/rollouts")["step"].astype(int)) == [0, 0, 0, 1, 1, 1]
    assert "patch" in pl.read_parquet(f"{root}/{RUN}/rollouts").columns
    after = query.connect(store, RUN)
    assert after.sql("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step").fetchall() == [(0, 3), (1, 3)]
    assert after.sql("SELECT version FROM checkpoints ORDER BY version").fetchall() == [(0,), (1,)]


def test_tandem_lake_migrate_reports_what_it_rewrote(tmp_path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    root = str(tmp_path / "lake")
    fill_every_table(root)
    _as_version_1(root)
    result = CliRunner().invoke(app, ["lake", "migrate", "--root", root])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "rewrote 9 files, 3 already current, 0 unreadable"
    assert len(pd.read_parquet(f"{root}/{RUN}/steps")) == 2
