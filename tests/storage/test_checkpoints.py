"""The weight-version registry: publish, latest, keep-last-N, and publishers that die."""

from __future__ import annotations

import pytest

from storage import checkpoints
from storage.atomic import write_bytes_atomic
from storage.errors import NotFoundError
from storage.fs import Store, open_store


def write_weights(store: Store, run: str, version: int) -> str:
    uri = checkpoints.weights_uri(store, run, version)
    write_bytes_atomic(store, f"{run}/weights/v{version}/model.safetensors", b"w" * 64)
    return uri


def test_publish_latest_and_keep_last_n(lake_root: str) -> None:
    store = open_store(lake_root)
    assert checkpoints.latest(store, "r") is None
    for version in range(1, 5):
        checkpoints.publish(store, "r", version, version - 1, write_weights(store, "r", version))
    latest = checkpoints.latest(store, "r")
    assert (latest.version, latest.step, latest.format) == (4, 3, "safetensors")
    assert latest.uri == store.url("r/weights/v4")

    assert checkpoints.retain(store, "r", keep_last=2) == [1, 2]
    assert checkpoints.list_versions(store, "r") == [3, 4]
    assert not store.fs.exists(store.path("r/weights/v1")) and not store.fs.exists(store.path("r/weights/v2"))
    assert store.fs.exists(store.path("r/weights/v3/model.safetensors"))
    with pytest.raises(NotFoundError, match=r"weight version 1 of run 'r' is not published; published: \[3, 4\]"):
        checkpoints.get(store, "r", 1)
    with pytest.raises(ValueError, match="keep_last must be >= 1"):
        checkpoints.retain(store, "r", keep_last=0)


def test_publishing_weights_that_were_not_written_is_refused(lake_root: str) -> None:
    store = open_store(lake_root)
    with pytest.raises(NotFoundError, match="weights of version 1 of run 'r' are not at .*write them completely"):
        checkpoints.publish(store, "r", 1, 0, checkpoints.weights_uri(store, "r", 1))
    assert checkpoints.list_versions(store, "r") == []


def test_a_publisher_that_dies_before_its_record_leaves_latest_unchanged(lake_root: str) -> None:
    store = open_store(lake_root)
    checkpoints.publish(store, "r", 1, 0, write_weights(store, "r", 1))
    write_weights(store, "r", 2)  # weights written, then the publisher died: no record
    assert checkpoints.latest(store, "r").version == 1
    assert checkpoints.prune(store, "r") == []  # v2 may still be publishing: left alone
    checkpoints.publish(store, "r", 3, 2, write_weights(store, "r", 3))
    assert checkpoints.prune(store, "r") == [2]  # older than the newest record: an orphan
    assert not store.fs.exists(store.path("r/weights/v2"))
    assert checkpoints.latest(store, "r").version == 3


def test_a_damaged_record_does_not_hide_older_versions(tmp_path) -> None:
    store = open_store(str(tmp_path))
    for version in (1, 2):
        checkpoints.publish(store, "r", version, version - 1, write_weights(store, "r", version))
    (tmp_path / "r/checkpoints/version=2/record.parquet").write_bytes(b"truncated")
    assert checkpoints.latest(store, "r").version == 1
