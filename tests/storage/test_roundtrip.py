"""Episodes, step metrics and tasks come back exactly as written, through pyarrow and
through the DuckDB views, on local disk and on S3."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import query, shards, tables
from storage.fs import open_store
from storage.schema import conform
from tests.storage.conftest import FINISH_REASONS, make_episodes

_TOKEN = st.integers(min_value=0, max_value=2**31 - 1)
_LOGPROB = st.floats(min_value=-1e4, max_value=0.0, width=32, allow_nan=False)
_TIME = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def episode_rows(draw: st.DrawFn) -> dict:
    n = draw(st.integers(min_value=0, max_value=50))  # completion tokens
    layers, top_k = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    routed = draw(st.one_of(st.none(), st.binary(min_size=n * layers * top_k, max_size=n * layers * top_k)))
    prompt = draw(st.lists(_TOKEN, max_size=40))
    return {
        "task_id": draw(st.text(min_size=1, max_size=20)),
        "group_id": draw(st.text(max_size=10)),
        "policy_versions": draw(st.lists(st.integers(0, 2**40), max_size=4)),
        "env_name": draw(st.sampled_from(["micro", "swe"])),
        "prompt_ids": prompt,
        "completion_ids": draw(st.lists(_TOKEN, min_size=n, max_size=n)),
        "loss_mask": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        "completion_logprobs": draw(st.lists(_LOGPROB, min_size=n, max_size=n)),
        "routed_experts": routed,
        "routed_experts_shape": None if routed is None else [n, layers, top_k],
        "num_prompt_tokens": len(prompt),
        "num_completion_tokens": n,
        "reward": draw(st.floats(allow_nan=False)),
        "advantage": draw(st.floats(allow_nan=False, allow_infinity=False)),
        "resolved": draw(st.booleans()),
        "finish_reason": draw(st.sampled_from(FINISH_REASONS)),
        "infra_failure": draw(st.booleans()),
        "infra_message": draw(st.one_of(st.none(), st.text(max_size=30))),
        "started_at": draw(_TIME),
        "conversation": draw(st.text(max_size=200)),
    }


_lake_dir = tempfile.TemporaryDirectory(prefix="lake-roundtrip-")
_examples = iter(range(10**9))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(episode_rows(), min_size=1, max_size=8), step=st.integers(0, 10**6))
def test_any_episodes_round_trip_through_pyarrow_and_duckdb(rows: list[dict], step: int) -> None:
    store = open_store(_lake_dir.name)
    run = f"run-{next(_examples)}"
    for i, row in enumerate(rows):
        row.update(run_id=run, step=step, sample_index=i)
    shards.write_shard(store, run, step, "shard-0", pa.Table.from_pylist(rows))

    back = shards.read_step(store, run, step).to_pylist()
    assert [{k: r[k] for k in rows[0]} for r in back] == rows

    lake = query.connect(store, run)
    columns = "sample_index, task_id, completion_ids, loss_mask, completion_logprobs, routed_experts, started_at, conversation, step"
    got = lake.sql(f"SELECT {columns} FROM rollouts ORDER BY sample_index").fetchall()
    want = [tuple(r[c.strip()] for c in columns.split(",")) for r in rows]
    assert got == want


def test_a_realistic_shard_round_trips_on_each_store(lake_root: str) -> None:
    store = open_store(lake_root)
    table = make_episodes("r", 3, 50, seed=1)
    url = shards.write_shard(store, "r", 3, "w0", table)
    assert url == store.url("r/rollouts/step=3/w0.parquet")

    back = shards.read_step(store, "r", 3)
    assert back.equals(conform(table, "rollouts"))
    lake = query.connect(store, "r")
    assert lake.sql("SELECT count(*), sum(num_completion_tokens) FROM rollouts").fetchall() == [
        (50, sum(table.column("num_completion_tokens").to_pylist()))
    ]


def test_missing_run_id_and_step_columns_are_filled_from_the_shard(tmp_path) -> None:
    store = open_store(str(tmp_path))
    table = make_episodes("r", 2, 3).drop_columns(["run_id", "step"])
    shards.write_shard(store, "r", 2, "w0", table)
    back = shards.read_step(store, "r", 2)
    assert set(back.column("run_id").to_pylist()) == {"r"} and set(back.column("step").to_pylist()) == {2}


def test_rows_of_another_step_or_run_are_refused(tmp_path) -> None:
    store = open_store(str(tmp_path))
    with pytest.raises(ValueError, match=r"column 'step' holds \[5\] but the shard is for step 2"):
        shards.write_shard(store, "r", 2, "w0", make_episodes("r", 5, 3))
    with pytest.raises(ValueError, match=r"column 'run_id' holds \['other'\]"):
        shards.write_shard(store, "r", 2, "w0", make_episodes("other", 2, 3))
    assert not (tmp_path / "r").exists()


def test_bad_columns_are_named(tmp_path) -> None:
    store = open_store(str(tmp_path))
    good = make_episodes("r", 0, 2)
    with pytest.raises(ValueError, match=r"unknown columns \['rewrad'\]"):
        shards.write_shard(store, "r", 0, "w0", good.append_column("rewrad", pa.array([1.0, 2.0])))
    with pytest.raises(ValueError, match="required column 'task_id' is missing"):
        shards.write_shard(store, "r", 0, "w0", good.drop_columns(["task_id"]))
    with pytest.raises(ValueError, match=r"rollouts\.reward: cannot store string as double"):
        shards.write_shard(
            store, "r", 0, "w0", good.set_column(good.schema.get_field_index("reward"), "reward", pa.array(["a", "b"]))
        )
    with pytest.raises(ValueError, match="shard name '../x' is not allowed"):
        shards.write_shard(store, "r", 0, "../x", good)


def test_step_metrics_and_tasks_round_trip(lake_root: str) -> None:
    store = open_store(lake_root)
    tables.write_step_metrics(store, "r", 4, {"reward_mean": 0.25, "loss": 1.5, "lr": 1e-5, "skipped": False})
    tasks = pa.Table.from_pylist(
        [{"instance_id": "toolz-1", "repo": "toolz", "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": ["t::b", "t::c"]}]
    )
    tables.write_tasks(store, "r", tasks)
    lake = query.connect(store, "r")
    assert lake.sql("SELECT step, reward_mean, loss, extra['lr'], skipped FROM steps").fetchall() == [
        (4, 0.25, 1.5, 1e-5, False)
    ]
    assert lake.sql("SELECT instance_id, len(PASS_TO_PASS) FROM tasks").fetchall() == [("toolz-1", 2)]


def test_step_metrics_that_are_not_numbers_are_refused(tmp_path) -> None:
    store = open_store(str(tmp_path))
    with pytest.raises(ValueError, match=r"step metrics \['note'\] are neither columns"):
        tables.write_step_metrics(store, "r", 0, {"loss": 1.0, "note": "hello"})
