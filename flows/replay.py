"""Replays: new runs computed from a finished run's stored trajectories, which they
only read (the source run stays byte-identical).

    replay-rescore  re-grade every stored final patch with the current grader into
                    the new run's `rescores` table; report agreement with the stored
                    rewards
    replay-train    train a new run on the source's episodes with another loss,
                    advantages or learning rate, from the source's starting weights

Each new run records its start in its `runs` table with source_run, source_steps and
the source's corpus, so where its data came from stays in the lake.
"""

from __future__ import annotations

import json
from typing import Any

from prefect import flow
from prefect.utilities.annotations import quote

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.corpus import corpus_id, run_tasks
from engines.rollout.step import GradeCache
from engines.trainer.lane import LaneConfig
from flows.config import RunTrainerConfig
from flows.prefect_setup import ensure_limits
from flows.provenance import corpus_fields, start_record
from flows.replay_config import ReplayTrainConfig, RescoreConfig
from flows.replay_source import resolve_run
from flows.resume import check_resume
from flows.trainer_lane import trainer_lane
from storage import checkpoints, runs, shards
from storage.fs import Store, open_store
from tasks.replay import rescore_step


@flow(name="replay-rescore", log_prints=True)
def replay_rescore(config: RescoreConfig) -> dict[str, Any]:
    store = open_store(config.storage)
    config = config.with_source(resolve_run(store, config.source_run))  # names the runs that exist
    assert config.run is not None  # named by with_source
    source = runs.latest_start(store, config.source_run) or {}
    tasks = run_tasks(store, config.source_run, config.corpus_path or source.get("corpus_path"))
    _check_corpus(tasks, source, config.source_run)
    steps = config.steps or shards.list_steps(store, config.source_run)
    runs.record_start(
        store,
        config.run,
        start_record(
            config,
            "rescore",
            None,
            **corpus_fields(tasks, config.corpus_path or source.get("corpus_path")),
            **_lineage(store, config.source_run, steps),
        ),
    )
    by_id = {t.instance_id: t for t in tasks}
    with GradingPool(config.env or _stored_env(source)) as grader:
        cache = GradeCache()
        per_step = [
            rescore_step(store, quote(grader), quote(cache), quote(by_id), config.source_run, config.run, s)
            for s in steps
        ]
    graded, agree = sum(s["graded"] for s in per_step), sum(s["agree"] for s in per_step)
    summary = {
        "run": config.run,
        "source_run": config.source_run,
        "steps": len(steps),
        "episodes": sum(s["episodes"] for s in per_step),
        "graded": graded,
        "agree": agree,
        "agreement": agree / graded if graded else None,
        "not_regraded": sum(s["skipped"] for s in per_step),
    }
    print(f"[rescore] {config.source_run} -> {config.run}: {agree}/{graded} re-grades agree with the stored rewards")
    return summary


@flow(name="replay-train", log_prints=True)
def replay_train(config: ReplayTrainConfig) -> dict[str, Any]:
    ensure_limits(config.run)  # the trainer lane takes a slot of the run's training limit
    store = open_store(config.storage)
    config = config.with_source(resolve_run(store, config.source_run))
    source = runs.latest_start(store, config.source_run) or {}
    steps = _source_steps(store, config)
    resolved = config.model_copy(
        update={
            "trainer": _trainer_over_source(config, source),
            "model_path": config.model_path or checkpoints.get(store, config.source_run, 0).uri,
            "steps": len(steps),
        }
    )
    may_differ = frozenset({"steps", "allow_config_change"})
    for change in check_resume(store, resolved.run, resolved, config.allow_config_change, may_differ):
        print(f"[replay] resuming {resolved.run} with a changed configuration: {change}")
    corpus = {k: source.get(k) for k in ("corpus_id", "corpus_path", "num_tasks")}
    runs.record_start(
        store,
        resolved.run,
        start_record(resolved, "replay-train", None, **corpus, **_lineage(store, config.source_run, steps)),
    )
    lane = LaneConfig(
        model_dir=resolved.model_path,
        storage=config.storage,
        run=resolved.run,
        source_run=config.source_run,
        first_step=steps[0],
        num_steps=len(steps),
        state_dir=config.state_dir,
        completion="any_shard",
        trainer=resolved.trainer,
    )
    metrics = trainer_lane(lane)
    print(f"[replay] trained {resolved.run} on {len(steps)} steps of {config.source_run}")
    return {
        "run": resolved.run,
        "source_run": config.source_run,
        "steps": len(steps),
        "published": [m["policy_version"] for m in metrics],
    }


def _lineage(store: Store, source_run: str, steps: list[int]) -> dict[str, Any]:
    return {"source_root": store.display, "source_run": source_run, "source_steps": steps}


def _check_corpus(tasks: list, source: dict, source_run: str) -> None:
    """The tasks read now must be the ones the source run recorded at its start."""
    recorded = source.get("corpus_id")
    if recorded and corpus_id(tasks) != recorded:
        raise ValueError(
            f"the tasks of run {source_run!r} ({corpus_id(tasks)}) are not the corpus it recorded "
            f"({recorded}): give corpus_path, the corpus the run used"
        )


def _stored_env(source: dict) -> EnvConfig:
    """The grading settings the source run stored (defaults for runs from before start records)."""
    stored = json.loads(source["config"]).get("env") if source.get("config") else None
    return EnvConfig.model_validate(stored) if stored else EnvConfig()


def _trainer_over_source(config: ReplayTrainConfig, source: dict) -> RunTrainerConfig:
    """The source run's trainer settings with the fields this config sets replacing them."""
    stored = json.loads(source["config"]).get("trainer", {}) if source.get("config") else {}
    return RunTrainerConfig.model_validate(_merge(stored, config.trainer.model_dump(exclude_unset=True)))


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _source_steps(store: Store, config: ReplayTrainConfig) -> list[int]:
    """Consecutive source steps from first_step (at most `steps` of them)."""
    available = set(shards.list_steps(store, config.source_run))
    steps = []
    while config.first_step + len(steps) in available and (config.steps is None or len(steps) < config.steps):
        steps.append(config.first_step + len(steps))
    if not steps or (config.steps is not None and len(steps) < config.steps):
        raise ValueError(
            f"run {config.source_run!r} has steps {sorted(available)}; first_step={config.first_step} "
            f"and steps={config.steps} ask for consecutive steps it does not have"
        )
    return steps
