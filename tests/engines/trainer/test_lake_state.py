"""Trainer state kept in the lake: a lane restarted on another machine, with an empty
local state folder, resumes at the step after the last one it saved."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.trainer.checkpoint import list_states, state_dir
from engines.trainer.lake_state import MARKER, lake_dir, lake_steps, set_aside_foreign, upload
from engines.trainer.lane import LaneConfig, TrainerLane, train_steps
from storage import checkpoints
from storage.fs import open_store
from storage.shards import write_shard
from tests.engines.trainer.rollouts import synthetic_rollouts


def _lane(root: str, model_dir: Path, state_dir: Path, steps: int) -> LaneConfig:
    return LaneConfig(
        model_dir=str(model_dir),
        storage={"root": root},
        run="r",
        num_steps=steps,
        state_dir=str(state_dir),
        poll_interval_s=0.05,
        wait_timeout_s=60,
        trainer={"seq_len": 64, "keep_last_states": 2},
    )


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.cluster
def test_a_lane_on_another_machine_resumes_from_the_lakes_state(tiny_model, tiny_model_dir, s3_bucket, tmp_path):
    root = f"s3://{s3_bucket}/lake"
    store = open_store(root)
    for step in range(3):
        write_shard(store, "r", step, "final", synthetic_rollouts(tiny_model, step=step, seed=step, run="r"))
    first = _lane(root, tiny_model_dir, tmp_path / "host-a", steps=3).model_copy(update={"num_steps": 2})
    train_steps(first)
    assert lake_steps(store, "r") == [0, 1]

    elsewhere = _lane(root, tiny_model_dir, tmp_path / "host-b", steps=3)
    lane = TrainerLane(elsewhere)
    try:
        assert lane.next_step == 2
        assert list_states(elsewhere.state_path()) == [1]
        results = [lane.train(2)]
    finally:
        lane.close()
    assert [r["policy_version"] for r in results] == [3]
    assert checkpoints.list_versions(store, "r") == [1, 2, 3]
    assert lake_steps(store, "r") == [1, 2]  # keep_last_states in the lake too
    optimizer = torch.load(elsewhere.state_path() / "step-00000002" / "optimizer.bin", weights_only=False)
    assert all(s["step"] == 3 for s in optimizer["state"].values())  # the restored optimizer took its third step


def test_a_state_folder_outside_a_local_lake_is_uploaded_into_it(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    local = tmp_path / "elsewhere" / "trainer_state"
    for step in (0, 1):
        folder = state_dir(local, step)
        (folder / "optimizer").mkdir(parents=True)
        (folder / "optimizer" / "state.bin").write_bytes(b"x" * step)
        (folder / MARKER).write_text("{}")
        upload(store, "r", local, step, keep_last=1)
    assert lake_steps(store, "r") == [1]
    assert Path(lake_dir(store, "r"), "step-00000001", "optimizer", "state.bin").read_bytes() == b"x"


def test_a_local_state_newer_than_the_lakes_weights_is_set_aside_not_resumed(tmp_path: Path) -> None:
    """A run of the same name in another lake (or in this one before it was emptied) left
    state after step 1; this lake has only v0, so that state is not its run's."""
    store = open_store(str(tmp_path / "lake"))
    local = tmp_path / "work" / "trainer_state"
    for step in (0, 1):
        state_dir(local, step).mkdir(parents=True)
        (state_dir(local, step) / MARKER).write_text("{}")

    def publish(version: int) -> None:
        weights = Path(checkpoints.weights_uri(store, "r", version))
        weights.mkdir(parents=True)
        checkpoints.publish(store, "r", version, version - 1, str(weights))

    publish(0)
    aside = set_aside_foreign(store, "r", local)
    assert aside is not None and aside.name.startswith("trainer_state.foreign-") and list_states(aside) == [0, 1]
    assert list_states(local) == []

    # Once the lake holds v1, a state after step 1 is its own: kept where it is.
    aside.rename(local)
    publish(1)
    assert set_aside_foreign(store, "r", local) is None and list_states(local) == [0, 1]
