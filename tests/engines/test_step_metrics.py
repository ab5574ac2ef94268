"""The per-step episode metrics (engines/step_metrics.py): the hack rate is the share of
graded episodes with any hack flag, infrastructure failures and rows that never recorded
flags (shards before schema version 3) left out, and it reaches the `steps` table."""

from __future__ import annotations

from pathlib import Path

from engines.rollout.records import rollouts_table
from engines.step_metrics import episode_metrics, hack_rate, hack_rules
from storage import layout
from storage.fs import open_store
from storage.parquet_io import read_table
from storage.tables import write_step_metrics

_UNSET = object()


def episode(flags: list[str] | None | object = _UNSET, infra: bool = False) -> dict:
    """A rollouts row of step 1 with the given hack flags (null when None, an empty list by default)."""
    return {
        "run_id": "r",
        "step": 1,
        "task_id": "t",
        "min_policy_version": 0,
        "num_completion_tokens": 3,
        "reward": float("nan") if infra else 0.0,
        "resolved": False,
        "infra_failure": infra,
        "hack_flags": [] if flags is _UNSET else flags,
    }


def test_the_hack_rate_is_the_share_of_flagged_episodes() -> None:
    table = rollouts_table(
        [episode(["equality_dunder"]), episode(), episode(["test_framework", "sys_modules"]), episode()]
    )
    assert hack_rate(table) == 0.5
    assert episode_metrics(table, 1)["hack_rate"] == 0.5


def test_a_step_without_flags_has_a_zero_hack_rate() -> None:
    table = rollouts_table([episode(), episode()])
    assert hack_rate(table) == 0.0
    assert not hack_rules(table)


def test_infrastructure_failures_are_left_out_of_the_hack_rate() -> None:
    table = rollouts_table([episode(["atexit"]), episode(), episode(infra=True), episode(infra=True)])
    assert episode_metrics(table, 1)["hack_rate"] == 0.5  # 1 of the 2 graded episodes
    assert episode_metrics(rollouts_table([episode(infra=True)]), 1)["hack_rate"] is None


def test_episodes_that_never_recorded_flags_count_neither_way() -> None:
    """A null hack_flags (shards before schema version 3) is unknown, not clean."""
    assert hack_rate(rollouts_table([episode(None), episode(None)])) is None
    assert hack_rate(rollouts_table([episode(None), episode(["builtins"])])) == 1.0
    assert hack_rate(rollouts_table([]).drop_columns(["hack_flags"])) is None
    assert hack_rate(rollouts_table([])) is None


def test_the_rules_count_each_episode_once() -> None:
    table = rollouts_table([episode(["ctypes", "ctypes", "builtins"]), episode(["ctypes"]), episode(None), episode()])
    assert hack_rules(table).most_common() == [("ctypes", 2), ("builtins", 1)]


def test_the_hack_rate_reaches_the_steps_table(tmp_path: Path) -> None:
    """The trainer lane's path: episode_metrics into write_step_metrics, which keeps it in `extra`."""
    store = open_store(str(tmp_path / "lake"))
    table = rollouts_table([episode(["frame_hooks"]), episode(), episode(), episode()])
    write_step_metrics(store, "r", 1, {**episode_metrics(table, 1), "policy_version": 2})
    row = read_table(store, store.path(layout.steps_file("r", 1))).to_pylist()[0]
    assert dict(row["extra"])["hack_rate"] == 0.25


def test_a_step_of_old_shards_leaves_the_hack_rate_out_of_the_steps_table(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    table = rollouts_table([episode(None), episode(None)])
    write_step_metrics(store, "r", 1, {**episode_metrics(table, 1), "policy_version": 2})
    row = read_table(store, store.path(layout.steps_file("r", 1))).to_pylist()[0]
    assert "hack_rate" not in dict(row["extra"])
