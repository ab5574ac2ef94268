"""Paths inside a lake root. One place, so every writer and reader agrees.

    <root>/<run>/rollouts/step=<n>/<shard>.parquet   one row per episode
    <root>/<run>/steps/step=<n>/metrics.parquet      one row per training step
    <root>/<run>/tasks/<name>.parquet                the task corpus the run used
    <root>/<run>/checkpoints/version=<v>/record.parquet   one row per weight version
    <root>/<run>/weights/v<v>/                       the weights a record points to
    <root>/<run>/runs/start-<n>.parquet              one row per start: config, code version, corpus, source
    <root>/<run>/rescores/step=<n>/scores.parquet    a replay's re-grades of a source run's episodes
    <root>/<run>/advantages/step=<n>/trained.parquet the advantages the trainer used, one row per episode
    <root>/<run>/evaluations/version=<v>/<name>.parquet   one row per episode of a held-out evaluation
    <root>/_experiments/<started>-<name>-<id>.parquet     lake-level: one row per learning-lab experiment

Lake-level folders start with `_`, so they are never taken for a run (storage/shards.py:
list_runs).

Partition keys (`step=`, `version=`) are in the folder names only, not in the files
(storage/partition.py), so pandas, pyarrow, polars and DuckDB open a table's folder
with their defaults.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_name(kind: str, name: str) -> str:
    """Run and shard names become path parts: keep them to a safe alphabet."""
    if not _NAME.match(name):
        raise ValueError(
            f"{kind} name {name!r} is not allowed: use letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (at most 128 characters)"
        )
    return name


def rollout_shard(run: str, step: int, shard: str) -> str:
    return f"{check_name('run', run)}/rollouts/step={int(step)}/{check_name('shard', shard)}.parquet"


def rollouts_dir(run: str) -> str:
    return f"{check_name('run', run)}/rollouts"


def step_dir(run: str, step: int) -> str:
    return f"{rollouts_dir(run)}/step={int(step)}"


def steps_file(run: str, step: int) -> str:
    return f"{check_name('run', run)}/steps/step={int(step)}/metrics.parquet"


def tasks_file(run: str, name: str = "corpus") -> str:
    return f"{check_name('run', run)}/tasks/{check_name('corpus', name)}.parquet"


def checkpoint_record(run: str, version: int) -> str:
    return f"{check_name('run', run)}/checkpoints/version={int(version)}/record.parquet"


def run_start(run: str, start: int) -> str:
    return f"{check_name('run', run)}/runs/start-{int(start):04d}.parquet"


def rescore_file(run: str, step: int) -> str:
    return f"{check_name('run', run)}/rescores/step={int(step)}/scores.parquet"


def advantages_file(run: str, step: int) -> str:
    return f"{check_name('run', run)}/advantages/step={int(step)}/trained.parquet"


def evaluations_file(run: str, version: int, name: str) -> str:
    return f"{check_name('run', run)}/evaluations/version={int(version)}/{check_name('evaluation', name)}.parquet"


EXPERIMENTS_DIR = "_experiments"


def experiment_file(stamp: str, name: str, unique: str) -> str:
    """One file per experiment: rows are only appended, by writers that never coordinate."""
    return f"{EXPERIMENTS_DIR}/{check_name('experiment', f'{stamp}-{name}-{unique}')}.parquet"


def weights_dir(run: str, version: int) -> str:
    return f"{check_name('run', run)}/weights/v{int(version)}"


# Globs relative to the root, for one run or all runs; `*` never matches the
# hidden `.name.tmp` files that an interrupted local write can leave behind.
GLOBS = {
    "rollouts": "{run}/rollouts/step=*/*.parquet",
    "steps": "{run}/steps/step=*/metrics.parquet",
    "tasks": "{run}/tasks/*.parquet",
    "checkpoints": "{run}/checkpoints/version=*/record.parquet",
    "runs": "{run}/runs/start-*.parquet",
    "rescores": "{run}/rescores/step=*/scores.parquet",
    "advantages": "{run}/advantages/step=*/trained.parquet",
    "evaluations": "{run}/evaluations/version=*/*.parquet",
}

# Tables of the whole lake, not of a run (globs relative to the root).
LAKE_GLOBS = {
    "experiments": EXPERIMENTS_DIR + "/*.parquet",
}

STEP_RE = re.compile(r"/step=(\d+)(?:/|$)")
