"""The evaluations table (one row per held-out evaluation episode, per run) and the
lake-level experiments table (rows only appended), written and queried back through
DuckDB with and without a run."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from storage import query, shards, tables
from storage.fs import open_store
from storage.migrate import migrate
from tests.storage.conftest import make_episodes


def evaluation_rows(n: int, resolved_every: int, pass_name: str = "greedy") -> pa.Table:
    rows = [
        {
            "evaluation": "before",
            "pass": pass_name,
            "task_id": f"task-{i}",
            "sample_index": 0,
            "attempts": 1 + i % 3,
            "first_attempt_passed": i % resolved_every == 0 and i % 3 == 0,
            "repeats": 0,
            "resolved": i % resolved_every == 0,
            "reward": float(i % resolved_every == 0),
            "patch": f"--- a/m.py\n+++ b/m.py\n@@ {i}",
            "num_turns": 2,
            "finish_reason": "submitted",
            "infra_failure": False,
            "conversation": f"<|user|>fix task {i}<|end|>",
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows)


def test_evaluation_episodes_are_queried_back_by_pass(lake_root: str) -> None:
    store = open_store(lake_root)
    shards.write_shard(store, "r", 0, "final", make_episodes("r", 0, 2))
    tables.write_evaluations(store, "r", 0, "before", evaluation_rows(10, 2))
    sampled = evaluation_rows(10, 5, "sampled")
    tables.write_evaluations(store, "r", 0, "before-sampled", sampled)
    tables.write_evaluations(store, "r", 4, "after", evaluation_rows(10, 1))

    lake = query.connect(store, "r")
    sql = "SELECT pass, avg(resolved::int) FROM evaluations WHERE version = 0 GROUP BY pass ORDER BY pass"
    assert lake.sql(sql).fetchall() == [("greedy", 0.5), ("sampled", 0.2)]
    assert lake.sql("SELECT version, count(*) FROM evaluations GROUP BY 1 ORDER BY 1").fetchall() == [(0, 20), (4, 10)]
    row = lake.sql("SELECT * FROM evaluations WHERE version = 4 AND task_id = 'task-3'").fetchall()[0]
    names = [c[0] for c in lake.sql("SELECT * FROM evaluations").description]
    got = dict(zip(names, row))
    assert got["run_id"] == "r" and got["attempts"] == 1 and got["patch"].endswith("@@ 3")
    assert query.connect(store).sql("SELECT count(*) FROM evaluations").fetchall() == [(30,)]


def test_evaluations_that_name_another_run_or_version_are_refused(tmp_path) -> None:
    store = open_store(str(tmp_path / "lake"))
    rows = evaluation_rows(2, 1).append_column("version", pa.array([3, 3], pa.int64()))
    with pytest.raises(ValueError, match=r"column 'version' holds \[3\], not 2"):
        tables.write_evaluations(store, "r", 2, "after", rows)


def test_an_evaluation_written_again_replaces_the_first(tmp_path) -> None:
    store = open_store(str(tmp_path / "lake"))
    tables.write_evaluations(store, "r", 0, "before", evaluation_rows(10, 2))
    tables.write_evaluations(store, "r", 0, "before", evaluation_rows(4, 1))
    assert query.connect(store, "r").sql("SELECT count(*), avg(resolved::int) FROM evaluations").fetchall() == [
        (4, 1.0)
    ]


def experiment(name: str, gain: float) -> dict:
    return {
        "name": name,
        "settings": json.dumps({"mode": "quick", "config": {"trainer": {"lr": 1e-4}}}),
        "figures": json.dumps({"gain_points": gain, "gain_interval_points": [gain - 5, gain + 5]}),
        "code_version": "git:abc",
        "started_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "wall_s": 600.0,
    }


def test_experiments_are_appended_and_listed_with_and_without_a_run(lake_root: str) -> None:
    store = open_store(lake_root)
    shards.write_shard(store, "r", 0, "final", make_episodes("r", 0, 2))
    tables.append_experiment(store, experiment("lr-1e-4", 2.5))
    tables.append_experiment(store, experiment("lr-1e-4", 2.5))  # same name and second: a row of its own
    tables.append_experiment(store, experiment("kl-0.1", -1.0))
    sql = "SELECT name, figures->>'gain_points' AS gain FROM experiments ORDER BY name, gain"
    expected = [("kl-0.1", "-1.0"), ("lr-1e-4", "2.5"), ("lr-1e-4", "2.5")]
    assert query.connect(store).sql(sql).fetchall() == expected
    assert query.connect(store, "r").sql(sql).fetchall() == expected
    assert shards.list_runs(store) == ["r"]  # the lake-level folder is not a run


def test_an_experiment_without_a_start_time_is_stamped_now(tmp_path) -> None:
    store = open_store(str(tmp_path / "lake"))
    row = experiment("x", 0.0)
    del row["started_at"]
    tables.append_experiment(store, row)
    (started,) = query.connect(store).sql("SELECT started_at FROM experiments").fetchall()[0]
    assert abs((datetime.now(UTC) - started).total_seconds()) < 60


def test_unknown_experiment_columns_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"experiments: unknown columns \['gain'\]"):
        tables.append_experiment(open_store(str(tmp_path / "lake")), {**experiment("x", 0.0), "gain": 1.0})


def test_an_empty_lake_has_empty_typed_views_of_both(tmp_path) -> None:
    lake = query.connect(open_store(str(tmp_path / "lake")))
    assert lake.sql("SELECT count(*) FROM evaluations").fetchall() == [(0,)]
    assert lake.sql("SELECT count(*) FROM experiments").fetchall() == [(0,)]
    types = {name: type_ for name, type_, *_ in lake.sql("DESCRIBE experiments").fetchall()}
    assert types["started_at"] == "TIMESTAMP WITH TIME ZONE" and types["wall_s"] == "DOUBLE"


def test_migrate_counts_the_new_tables_as_current(tmp_path) -> None:
    store = open_store(str(tmp_path / "lake"))
    tables.write_evaluations(store, "r", 0, "before", evaluation_rows(2, 1))
    tables.append_experiment(store, experiment("x", 0.0))
    report = migrate(store)
    assert report.current == 2 and report.rewritten == [] and report.failed == {}
