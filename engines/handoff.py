"""The contract between the rollout lane and the trainer lane: how they meet through
the lake, and nothing else (engines/rollout/lane.py and engines/trainer/lane.py use it).

- The rollout lane writes step s's episodes as the shard named `COMPLETE_SHARD`
  (`<root>/<run>/rollouts/step=<s>/final.parquet`, atomic): from then on step s is
  complete and the trainer may train on it. A writer of several shards writes it last.
- The trainer trains step s and publishes weight version s + 1 (storage/checkpoints.py).
- The rollout lane generates step s only with a version allowed by the staleness bound
  (engines/staleness.py: v >= s - async_level), waiting for one by polling the
  published versions.
- Each lane keeps local files of a run (server logs, trainer state, copied weights) in
  the run's work folder, `work_dir`.

Both waits poll the lake (local or s3://) and give up after a timeout whose message
says which lane to look at.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from engines.staleness import version_to_use
from storage import checkpoints, shards
from storage.fs import Store

COMPLETE_SHARD = "final"  # the shard that completes a step for the trainer lane
Completion = Literal["final_shard", "any_shard"]  # any_shard: for writers of exactly one shard per step


def work_dir(root: str, run: str) -> Path:
    """Local files of `run`: inside the run when the lake is local; with the lake on S3, in
    the cache under a folder of the lake's own (`lake_folder`), so two lakes' runs of one
    name never share a trainer state or weights."""
    if not root.startswith("s3://"):
        return Path(root).absolute() / run
    return Path.home() / ".cache" / "tandem-rl" / "work" / lake_folder(root) / run


def lake_folder(root: str) -> str:
    """A folder name for the lake `root`: readable, and unique by a hash of the whole root."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", root.removeprefix("s3://")).strip("-")[:48]
    return f"{readable}-{hashlib.sha256(root.rstrip('/').encode()).hexdigest()[:8]}"


def publish_step(store: Store, run: str, step: int, table: pa.Table) -> str:
    """Write step `step`'s episodes as its complete shard; returns the shard's URI."""
    return shards.write_shard(store, run, step, COMPLETE_SHARD, table)


def step_complete(store: Store, run: str, step: int, completion: Completion = "final_shard") -> bool:
    if completion == "final_shard":
        return shards.shard_exists(store, run, step, COMPLETE_SHARD)
    path = store.path(f"{run}/rollouts/step={step}")
    return bool(store.call("list shards", lambda: store.fs.glob(path + "/*.parquet")))


def wait_for_step(store: Store, run: str, step: int, completion: Completion, poll_s: float, timeout_s: float) -> None:
    """Block until step `step` of `run` is complete (the trainer's wait)."""
    deadline = time.monotonic() + timeout_s
    while not step_complete(store, run, step, completion):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rollouts of step {step} of run {run!r} under {store.display} were not complete after "
                f"{timeout_s:.0f} s (waiting for shard {COMPLETE_SHARD!r}): is the rollout lane running?"
            )
        time.sleep(poll_s)


@dataclass(frozen=True)
class PolicyWait:
    version: int
    waited_s: float


async def wait_for_policy(
    store: Store, run: str, step: int, async_level: int, timeout_s: float, poll_s: float = 0.25
) -> PolicyWait:
    """The newest published version allowed for `step`, once there is one (the rollout
    lane's wait: it blocks while the trainer is behind)."""
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        latest = await asyncio.to_thread(checkpoints.latest, store, run)  # a lake outage waits off the loop
        version = version_to_use(step, async_level, None if latest is None else latest.version)
        if version is not None:
            return PolicyWait(version, time.monotonic() - start)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"step {step}: no policy version >= {step - async_level} after {timeout_s:.0f} s; "
                "is the trainer lane running?"
            )
        await asyncio.sleep(poll_s)
