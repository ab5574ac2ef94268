"""The rollout host's local copies of weight versions published to an s3:// lake:
bounded, never evicting what the servers use, used in place on a local lake."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.rollout.weight_cache import WeightCache, WeightCacheFullError
from storage import checkpoints
from storage.fs import Store, open_store

pytestmark = pytest.mark.cluster


def _publish(store: Store, run: str, version: int) -> str:
    uri = checkpoints.weights_uri(store, run, version)
    path = store.path(f"{run}/weights/v{version}")
    store.fs.makedirs(path, exist_ok=True)  # a no-op on S3
    store.fs.pipe({f"{path}/config.json": b"{}", f"{path}/model.safetensors": f"w{version}".encode()})
    return checkpoints.publish(store, run, version, version - 1, uri).uri


@pytest.mark.s3
def test_the_cache_holds_at_most_its_versions_and_keeps_those_in_use(s3_bucket: str, tmp_path: Path) -> None:
    store = open_store(f"s3://{s3_bucket}/lake")
    cache = WeightCache(store, tmp_path / "weights", max_versions=3)
    started_from = 0
    served = started_from
    for version in range(6):
        uri = _publish(store, "r", version)
        local = cache.local_dir(uri, version, {started_from, served})
        assert (local / "model.safetensors").read_bytes() == f"w{version}".encode()
        assert len(cache.versions()) <= 3
        assert {started_from, served, version} <= set(cache.versions())
        served = version
    assert cache.versions() == [0, 4, 5]
    assert [p.name for p in (tmp_path / "weights").iterdir() if p.name.startswith(".")] == []  # no partial copies
    assert cache.local_dir(uri, 5, {0, 5}) == local  # copied once


@pytest.mark.s3
def test_a_copy_of_other_weights_under_the_same_uri_is_replaced(s3_bucket: str, tmp_path: Path) -> None:
    """The lake emptied and a run of the same name started again: its v0 is other weights."""
    store = open_store(f"s3://{s3_bucket}/lake")
    cache = WeightCache(store, tmp_path / "weights", max_versions=2)
    uri = _publish(store, "r", 0)
    assert (cache.local_dir(uri, 0, {0}) / "model.safetensors").read_bytes() == b"w0"
    store.fs.pipe({store.path("r/weights/v0/model.safetensors"): b"other weights"})
    cache = WeightCache(store, tmp_path / "weights", max_versions=2)  # the new run's rollout lane
    assert (cache.local_dir(uri, 0, {0}) / "model.safetensors").read_bytes() == b"other weights"
    assert cache.versions() == [0]


@pytest.mark.s3
def test_a_cache_whose_versions_are_all_in_use_refuses_a_new_one(s3_bucket: str, tmp_path: Path) -> None:
    store = open_store(f"s3://{s3_bucket}/lake")
    cache = WeightCache(store, tmp_path / "weights", max_versions=1)
    cache.local_dir(_publish(store, "r", 0), 0, {0})
    with pytest.raises(WeightCacheFullError, match="weight_cache_versions"):
        cache.local_dir(_publish(store, "r", 1), 1, {0})
    assert cache.versions() == [0]


def test_weights_on_a_local_lake_are_used_in_place(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    cache = WeightCache(store, tmp_path / "weights", max_versions=3)
    uri = _publish(store, "r", 0)
    assert cache.local_dir(uri, 0, {0}) == Path(uri)
    assert not (tmp_path / "weights").exists()
