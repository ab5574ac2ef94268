"""Per-step metrics in TensorBoard event files: off by default, and what is written
reads back as TensorBoard would read it (TFRecord framing, Event protos). The W&B and
MLflow sinks, through a real run, are in test_trackers.py."""

from __future__ import annotations

import struct
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event

from flows.config import RunConfig
from flows.config_loader import load_config
from flows.metrics import SinkGroup, TensorBoardSink
from flows.sinks import metrics_sink


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in every event file under `logdir`: tag -> [(step, value)]."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = Event.FromString(data[pos + 12 : pos + 12 + length])  # 8 length + 4 length crc
            pos += 12 + length + 4  # payload + its crc
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    config = load_config(RunConfig, None, []).metrics
    assert config.sinks == ["tensorboard"] and not config.writes()
    assert metrics_sink(config, "rollout", "r", tmp_path) is None


def test_rollout_and_trainer_steps_read_back_from_one_folder(tmp_path: Path) -> None:
    cfg = load_config(RunConfig, None, ["--metrics.tensorboard_dir", str(tmp_path / "tb")])
    rollout = metrics_sink(cfg.metrics, "rollout", "r", tmp_path)
    trainer = metrics_sink(cfg.metrics, "trainer", "r", tmp_path)
    assert isinstance(rollout, SinkGroup) and isinstance(rollout.sinks[0], TensorBoardSink)
    assert trainer is not None
    for step in range(3):
        rollout.log(
            step, {"reward_mean": 0.1 * step, "tokens": 100 + step, "policy_version": step, "notes": "text"}, "rollout"
        )
        trainer.log(step, {"loss": -0.5 * step, "grad_norm": 1.0, "step": step}, "trainer")
    rollout.log_evaluation(3, "after", {"pass@1": 0.25, "tasks": 4, "solved": ["a"]})
    rollout.close()
    trainer.close()
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {
        "eval/after/pass_at_1",
        "eval/after/tasks",
        "rollout/reward_mean",
        "rollout/tokens",
        "rollout/policy_version",
        "trainer/loss",
        "trainer/grad_norm",
    }
    assert [s for s, _ in scalars["rollout/reward_mean"]] == [0, 1, 2]
    assert [round(v, 5) for _, v in scalars["rollout/reward_mean"]] == [0.0, 0.1, 0.2]
    assert [v for _, v in scalars["trainer/loss"]] == [0.0, -0.5, -1.0]
    assert scalars["eval/after/pass_at_1"] == [(3, 0.25)]


def test_a_rollout_steps_hack_rate_reaches_the_trackers(tmp_path: Path) -> None:
    """The rollout lane logs episode_metrics as they are: a step's hack rate becomes
    rollout/hack_rate; a step of shards that never recorded flags logs none."""
    from engines.rollout.records import rollouts_table
    from engines.step_metrics import episode_metrics

    def step(flags: list[list[str] | None]) -> dict:
        rows = [{"run_id": "r", "step": 0, "task_id": "t", "hack_flags": f} for f in flags]
        return episode_metrics(rollouts_table(rows), 0)

    cfg = load_config(RunConfig, None, ["--metrics.tensorboard_dir", str(tmp_path / "tb")])
    sink = metrics_sink(cfg.metrics, "rollout", "r", tmp_path)
    assert sink is not None
    sink.log(0, step([["builtins"], [], [], []]), "rollout")
    sink.log(1, step([[], []]), "rollout")
    sink.log(2, step([None, None]), "rollout")
    sink.close()
    assert read_scalars(tmp_path / "tb")["rollout/hack_rate"] == [(0, 0.25), (1, 0.0)]
