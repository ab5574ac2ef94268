"""Shard invariants under crashes and concurrency: a shard is visible only when
complete, a rewrite replaces it, concurrent writers and a reader never see a
partial or duplicated episode. Unknown runs and steps are named with what exists."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import query, shards
from storage.errors import NotFoundError
from storage.fs import open_store
from storage.parquet_io import read_table
from tests.storage.conftest import make_episodes

REPO = Path(__file__).resolve().parents[2]


def start_writer(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.storage.writer_process", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_during_write(proc: subprocess.Popen, write_index: int, rng: random.Random) -> int:
    """SIGKILL `proc` part-way through write number `write_index` (>= 1): at a random
    fraction of the time its earlier writes took, so the kill usually lands inside it.
    Returns the number of the write the kill interrupted: on a busy machine the writer
    may have finished `write_index` and started the next one before the signal landed."""
    started: dict[int, float] = {}
    took: list[float] = []
    for line in proc.stdout:
        event, index = line.split()
        if event == "writing":
            started[int(index)] = time.monotonic()
            if int(index) == write_index:
                break
        else:
            took.append(time.monotonic() - started[int(index)])
    else:
        raise AssertionError(f"writer exited early: {proc.stderr.read()}")
    time.sleep(rng.uniform(0.1, 0.95) * sum(took) / len(took))
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    started_after = [int(index) for event, index in map(str.split, proc.stdout) if event == "writing"]
    return max([write_index, *started_after])


@pytest.mark.slow
def test_a_writer_killed_during_a_write_leaves_no_partial_shard(lake_root: str) -> None:
    rng = random.Random(0)
    store = open_store(lake_root)
    for attempt in range(2):
        proc = start_writer("fresh", lake_root, f"r{attempt}", "7", "500")
        killed_at = kill_during_write(proc, rng.randint(1, 2), rng)
        # Earlier shards are whole; the one being written is absent or whole, never partial.
        visible = {
            Path(p).name: read_table(store, p).num_rows
            for p in store.fs.glob(store.path(f"r{attempt}/rollouts/step=7/*.parquet"))
        }
        expected = {f"s{i}.parquet": 500 + i % 2 for i in range(killed_at + 1)}
        assert visible.items() <= expected.items()
        assert set(expected) - set(visible) <= {f"s{killed_at}.parquet"}


@pytest.mark.slow
def test_a_writer_killed_while_rewriting_leaves_the_old_or_new_shard_whole(lake_root: str) -> None:
    rng = random.Random(1)
    store = open_store(lake_root)
    proc = start_writer("loop", lake_root, "r", "3", "s", "500")
    kill_during_write(proc, rng.randint(1, 2), rng)
    table = shards.read_step(store, "r", 3)
    assert table.num_rows in (500, 501)
    assert len(shards.shard_paths(store, "r", 3)) == 1
    assert query.connect(store, "r").sql("SELECT count(*) FROM rollouts").fetchall() == [(table.num_rows,)]


def test_rewriting_a_shard_replaces_it_without_duplicates(lake_root: str) -> None:
    store = open_store(lake_root)
    shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 10, seed=1))
    shards.write_shard(store, "r", 0, "w0", make_episodes("r", 0, 6, seed=2))
    shards.write_shard(store, "r", 0, "w1", make_episodes("r", 0, 4, seed=3, first_index=100))
    assert shards.read_step(store, "r", 0).num_rows == 10
    assert len(shards.shard_paths(store, "r", 0)) == 2
    lake = query.connect(store, "r")
    assert lake.sql("SELECT count(*), count(DISTINCT sample_index) FROM rollouts").fetchall() == [(10, 10)]


@pytest.mark.slow
def test_two_writers_and_a_reader_at_once_see_only_whole_shards(lake_root: str) -> None:
    steps, rows = 4, 200
    store = open_store(lake_root)
    writers = [start_writer("steps", lake_root, "r", f"w{i}", str(steps), str(rows), str(i * 10_000)) for i in range(2)]
    reads = 0
    while any(w.poll() is None for w in writers) or reads == 0:
        try:
            visible = shards.list_steps(store, "r")
        except NotFoundError:
            continue  # neither writer has created the run yet
        for step in visible:
            table = shards.read_step(store, "r", step)
            assert table.num_rows in (rows, 2 * rows)
            assert len(set(table.column("sample_index").to_pylist())) == table.num_rows
        (count,) = query.connect(store, "r").sql("SELECT count(*) FROM rollouts").fetchall()[0]
        assert count % rows == 0
        reads += 1
    for w in writers:
        assert w.wait(timeout=60) == 0, w.stderr.read()
    assert shards.list_steps(store, "r") == list(range(steps))
    lake = query.connect(store, "r")
    assert lake.sql("SELECT count(*), count(DISTINCT (step, sample_index)) FROM rollouts").fetchall() == [
        (2 * steps * rows, 2 * steps * rows)
    ]


def test_unknown_run_and_step_errors_list_what_exists(lake_root: str) -> None:
    store = open_store(lake_root)
    with pytest.raises(NotFoundError, match="run 'nope' not found under .*there are no runs there yet"):
        shards.list_steps(store, "nope")
    for step in (0, 1, 2, 5):
        shards.write_shard(store, "alpha", step, "w0", make_episodes("alpha", step, 2))
    shards.write_shard(store, "beta", 0, "w0", make_episodes("beta", 0, 2))
    with pytest.raises(NotFoundError, match="run 'gamma' not found under .*runs there: alpha, beta"):
        shards.read_step(store, "gamma", 0)
    with pytest.raises(NotFoundError, match="run 'gamma' not found .*runs there: alpha, beta"):
        query.connect(store, "gamma")
    with pytest.raises(NotFoundError, match=r"step 3 of run 'alpha' has no shards .*steps there: 0-2, 5"):
        shards.read_step(store, "alpha", 3)
    with pytest.raises(ValueError, match="run name 'a/b' is not allowed"):
        shards.read_step(store, "a/b", 0)
