"""Which finished run a scheduled job reads: a run named by the user, or `newest`,
the rl run of the lake that started last (by its newest start record). Schedules
use `newest` so that a nightly evaluation or re-grade follows whatever was trained
last without editing the deployment."""

from __future__ import annotations

from datetime import datetime

from storage import checkpoints, runs, shards
from storage.fs import Store

NEWEST = "newest"  # reserved: a run literally named so cannot be chosen by name here


def resolve_run(store: Store, name: str) -> str:
    """`name` itself (which must exist), or the newest rl run's name for `newest`."""
    if name != NEWEST:
        shards.require_run(store, name)  # names the runs that exist
        return name
    started: list[tuple[datetime, str]] = []
    for run in shards.list_runs(store):
        start = runs.latest_start(store, run)
        if start is not None and start.get("kind") == "rl":
            started.append((start["started_at"], run))
    if not started:
        raise ValueError(
            f"run: {NEWEST!r} asks for the newest rl run under {store.display}, and there is none; "
            "train one (tandem run) or name the run"
        )
    return max(started)[1]


def require_weights(store: Store, run: str) -> checkpoints.Checkpoint:
    """The run's newest published weights; a clear refusal when it has none."""
    latest = checkpoints.latest(store, run)
    if latest is None:
        raise ValueError(
            f"run {run!r} under {store.display} has no published weights, so there is nothing to evaluate: "
            "its rl run has not finished its warm start yet; evaluate another run or let it run"
        )
    return latest
