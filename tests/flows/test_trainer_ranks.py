"""Trackers with several trainer ranks: under torchrun every rank trains and rank 0
alone logs each step (flows/trainer_ranks.py); a run with trackers and
trainer.processes > 1 is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.model.load import load_moe_causal_lm
from engines.trainer.lane import LaneConfig
from engines.trainer.torchrun import LANE_ENTRY, torchrun_lane
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.metrics import MetricsConfig
from flows.trainer_lane import rank_entry
from flows.trainer_ranks import logs_to_trackers, step_logger
from storage.fs import open_store
from storage.shards import write_shard
from tests.engines.trainer.rollouts import synthetic_rollouts
from tests.flows.test_metrics import read_scalars

REPO = Path(__file__).resolve().parents[2]


def test_rank_0_alone_logs_to_the_trackers() -> None:
    assert logs_to_trackers({}) and logs_to_trackers({"RANK": "0", "LOCAL_RANK": "0"})
    assert not logs_to_trackers({"RANK": "1", "LOCAL_RANK": "1"})
    assert not logs_to_trackers({"RANK": "2", "LOCAL_RANK": "0"})  # rank 0 of a second node is not rank 0
    assert step_logger(None) is None


def test_the_ranks_run_the_tracker_entry_only_when_a_tracker_writes(tmp_path: Path) -> None:
    assert rank_entry(None) == LANE_ENTRY and rank_entry(MetricsConfig()) == LANE_ENTRY  # tensorboard without a folder
    tracked = MetricsConfig(sinks=["tensorboard"], tensorboard_dir=str(tmp_path))
    entry = rank_entry(tracked)
    assert entry[:2] == ("-m", "flows.trainer_ranks")
    assert MetricsConfig.model_validate_json(entry[entry.index("--metrics") + 1]) == tracked


def test_trackers_with_several_trainer_ranks_are_accepted() -> None:
    config = load_config(RunConfig, None, ["--metrics.sinks", '["wandb"]', "--trainer.processes", "2"])
    assert config.metrics.writes() and config.trainer.processes == 2


@pytest.mark.slow
def test_two_gloo_ranks_write_one_trainer_record(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """A step trained by 2 ranks reaches TensorBoard once, from rank 0: one event file, one point."""
    lane = LaneConfig(
        model_dir=str(tiny_model_dir),
        storage={"root": str(tmp_path / "lake")},
        run="ranks",
        num_steps=1,
        poll_interval_s=0.05,
        wait_timeout_s=60,
        trainer={"seq_len": 64, "micro_batch_rows": 2, "processes": 2},
    )
    torch.manual_seed(0)
    model = load_moe_causal_lm(tiny_model_dir)
    write_shard(
        open_store(lane.storage), lane.run, 0, "final", synthetic_rollouts(model, groups=3, seed=20, run=lane.run)
    )
    metrics = MetricsConfig(sinks=["tensorboard"], tensorboard_dir=str(tmp_path / "tb"))
    # The ranks import the checkout's modules and share the cores.
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(REPO)
    assert torchrun_lane(lane, 2, entry=rank_entry(metrics)) == 1
    assert len(list((tmp_path / "tb").iterdir())) == 1, "a rank other than 0 opened a tracker"
    scalars = read_scalars(tmp_path / "tb")
    assert [step for step, _ in scalars["trainer/loss"]] == [0]
    assert scalars["trainer/policy_version"] == [(0, 1.0)]
