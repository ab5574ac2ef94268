"""Weight retention: the newest versions rollouts may use, milestones, and whatever is
in use are kept; the rest go, record first; a disk that fills up mid-write leaves
the run resumable."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import checkpoints, shards
from storage.fs import open_store
from storage.retention import apply_retention, versions_to_keep
from tests.storage.conftest import make_episodes


def _publish(store, run: str, version: int) -> None:
    uri = checkpoints.weights_uri(store, run, version)
    path = store.path(f"{run}/weights/v{version}")
    store.fs.makedirs(path, exist_ok=True)
    store.fs.pipe(path + "/model.safetensors", b"w" * 64)
    checkpoints.publish(store, run, version, max(0, version - 1), uri)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), min_size=1), st.integers(1, 5), st.integers(0, 12), st.sets(st.integers(0, 60)))
def test_the_newest_the_milestones_and_those_in_use_are_kept(published, keep_last, every, in_use) -> None:
    keep = versions_to_keep(published, keep_last, every, in_use)
    ordered = sorted(published)
    assert set(ordered[-keep_last:]) <= keep
    assert in_use & published <= keep
    assert {v for v in published if every and v % every == 0} <= keep
    assert keep <= published
    extra = keep - set(ordered[-keep_last:]) - in_use - {v for v in published if every and v % every == 0}
    assert not extra  # nothing else is kept


def test_a_long_run_keeps_a_handful_of_versions(lake_root: str) -> None:
    store = open_store(lake_root)
    # The default run's 50 steps on disk; fewer on moto, where each publication is slower.
    last, every = (50, 10) if not lake_root.startswith("s3://") else (7, 5)
    served = 0
    for version in range(last + 1):
        _publish(store, "r", version)
        if version % 3 == 0:
            served = version  # the rollout lane lags behind and serves an older version for a while
        apply_retention(store, "r", keep_last=2, milestone_every=every, in_use={served})
        assert served in checkpoints.list_versions(store, "r")
    expected = sorted({v for v in range(0, last + 1, every)} | {last - 2, last - 1, last})
    assert checkpoints.list_versions(store, "r") == expected
    assert checkpoints.latest(store, "r").version == last
    weights = sorted(int(p.rstrip("/").rsplit("/v", 1)[1]) for p in store.fs.ls(store.path("r/weights"), detail=False))
    assert weights == expected  # no weights left without a record


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs: a real ENOSPC for the writes that fill it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    # The tmpfs marker's requirement (tests/host_requirements.py) was checked before the run.
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    assert done.returncode == 0, f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.tmpfs
def test_a_full_disk_mid_write_leaves_the_run_resumable(small_disk: Path) -> None:
    store = open_store(str(small_disk / "lake"))
    shards.write_shard(store, "r", 0, "final", make_episodes("r", 0, 4))
    _publish(store, "r", 0)
    ballast = small_disk / "ballast"
    with pytest.raises(OSError) as info:  # fill the disk with a shard far too large for it
        with open(ballast, "wb") as f:
            f.write(os.urandom(700 * 1024))
        shards.write_shard(store, "r", 1, "final", make_episodes("r", 1, 2000, seed=1))
    assert info.value.errno == errno.ENOSPC or "No space" in str(info.value)
    # Nothing half-written is visible: step 1 has no shard, step 0 and v0 are whole.
    assert not shards.shard_exists(store, "r", 1, "final")
    assert shards.shard_exists(store, "r", 0, "final")
    assert checkpoints.latest(store, "r").version == 0
    ballast.unlink()  # space again (retention, or a person): the same write now succeeds
    shards.write_shard(store, "r", 1, "final", make_episodes("r", 1, 2000, seed=1))
    assert shards.shard_exists(store, "r", 1, "final")
    assert [p.name for p in (small_disk / "lake/r/rollouts/step=1").iterdir()] == ["final.parquet"]
