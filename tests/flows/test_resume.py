"""Resume safety: a re-run under a stored run's name continues it only with the same
configuration (rl.steps aside) unless asked to; unnamed runs get a new name each."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.provenance import start_record
from flows.resume import ConfigChangedError, check_resume
from storage import runs
from storage.fs import open_store


def started(root: str, *overrides: str) -> RunConfig:
    """A run 'exp' whose first start was recorded with `overrides`, as the rl flow does."""
    cfg = load_config(RunConfig, None, ["--run", "exp", "--storage.root", root, *overrides])
    runs.record_start(open_store(root), "exp", start_record(cfg, "rl", None))
    return cfg


def test_a_rerun_with_another_config_is_refused_listing_the_keys(tmp_path) -> None:
    root = str(tmp_path / "lake")
    started(root, "--rl.steps", "5")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--run",
            "exp",
            "--storage.root",
            root,
            "--rl.steps",
            "9",
            "--trainer.lr",
            "1e-3",
            "--rl.group_size",
            "4",
        ],
    )
    assert result.exit_code == 1
    assert "2 keys differ (stored -> now)" in result.stderr
    assert "- rl.group_size: 8 -> 4" in result.stderr and "- trainer.lr: 0.0001 -> 0.001" in result.stderr
    assert "rl.steps" not in result.stderr.split("(stored -> now)")[1].split("Use a new run name")[0]
    assert "--allow_config_change true" in result.stderr
    assert runs.list_starts(open_store(root), "exp") == [0]  # nothing was started


def test_a_rerun_that_changes_only_the_step_count_resumes(tmp_path) -> None:
    root = str(tmp_path / "lake")
    first = started(root, "--rl.steps", "5")
    store = open_store(root)
    assert check_resume(store, "exp", first, first.allow_config_change) == []  # the same config resumes
    longer = load_config(RunConfig, None, ["--run", "exp", "--storage.root", root, "--rl.steps", "20"])
    assert check_resume(store, "exp", longer, longer.allow_config_change) == []
    other = load_config(RunConfig, None, ["--run", "exp", "--storage.root", root, "--rl.seed", "3"])
    with pytest.raises(ConfigChangedError, match=r"1 key differs .*\n  - rl.seed: 0 -> 3\n"):
        check_resume(store, "exp", other, other.allow_config_change)


def test_the_override_lets_a_changed_config_resume_and_is_recorded(tmp_path) -> None:
    root = str(tmp_path / "lake")
    started(root)
    store = open_store(root)
    forced = load_config(
        RunConfig,
        None,
        ["--run", "exp", "--storage.root", root, "--trainer.lr", "1e-3", "--allow_config_change", "true"],
    )
    assert check_resume(store, "exp", forced, forced.allow_config_change) == ["trainer.lr: 0.0001 -> 0.001"]
    runs.record_start(store, "exp", start_record(forced, "rl", None))
    latest = runs.latest_start(store, "exp")
    assert latest["start"] == 1 and json.loads(latest["config"])["trainer"]["lr"] == 1e-3
    assert latest["code_version"].startswith(("git:", "tandem-rl "))


def test_runs_without_a_name_get_a_new_one_each() -> None:
    a, b = RunConfig(), RunConfig()
    assert a.run != b.run and a.run.startswith("tiny-moe-")
    assert load_config(RunConfig, None, ["--run", "exp"]).run == "exp"
