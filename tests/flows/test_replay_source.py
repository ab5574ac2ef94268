"""`newest` finds the rl run that started last; a run without weights is refused by name."""

from __future__ import annotations

import pytest

from flows.config import RunConfig
from flows.provenance import start_record
from flows.replay_config import RescoreConfig
from flows.replay_source import require_weights, resolve_run
from storage import checkpoints, runs
from storage.fs import open_store


def _start(store, run: str, kind: str = "rl") -> None:
    runs.record_start(store, run, start_record(RunConfig(run=run), kind, None))


def test_newest_is_the_rl_run_that_started_last(tmp_path):
    store = open_store(str(tmp_path))
    _start(store, "first")
    _start(store, "second")
    _start(store, "second-rescore", kind="rescore")  # not an rl run: never the newest
    assert resolve_run(store, "newest") == "second"
    _start(store, "first")  # resumed later: its newest start counts
    assert resolve_run(store, "newest") == "first"
    assert resolve_run(store, "second") == "second"


def test_no_run_and_an_unknown_run_are_refused_clearly(tmp_path):
    store = open_store(str(tmp_path))
    with pytest.raises(ValueError, match="newest rl run .* there is none"):
        resolve_run(store, "newest")
    _start(store, "exp1")
    with pytest.raises(Exception, match="'exp2' not found .* exp1"):
        resolve_run(store, "exp2")


def test_a_run_without_weights_is_refused_by_name(tmp_path):
    store = open_store(str(tmp_path))
    _start(store, "exp1")
    with pytest.raises(ValueError, match="'exp1' .* no published weights"):
        require_weights(store, "exp1")
    weights = tmp_path / "exp1" / "weights" / "v0"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    checkpoints.publish(store, "exp1", 0, -1, str(weights))
    assert require_weights(store, "exp1").version == 0


def test_a_rescore_of_the_newest_run_is_named_after_the_run_it_finds():
    config = RescoreConfig(source_run="newest")
    assert config.run is None  # not "newest-rescore-...": the flow names it
    named = config.with_source("exp1")
    assert named.source_run == "exp1" and named.run.startswith("exp1-rescore-")
    with pytest.raises(ValueError, match="is the source run"):
        RescoreConfig(source_run="newest", run="exp1").with_source("exp1")
