"""Small finished runs in a lake, made without vLLM: real micro tasks whose stored
episodes carry patches graded by the real sandboxed grader (for re-grading), or
episodes scored by the tiny model itself (for re-training), plus the start record
and starting weights a run of the rl flow leaves."""

from __future__ import annotations

import hashlib
import shutil
from datetime import UTC, datetime
from pathlib import Path

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.corpus import save_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.inference.types import Episode
from engines.rollout.step import GradeCache, episodes_table, grade_episodes
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.provenance import start_record
from storage import checkpoints, runs, shards
from storage.fs import open_store
from tasks.corpus import publish_corpus_table


def graded_run(root: str, run: str, corpus_dir: Path, steps: int = 2, tasks_per_step: int = 3) -> int:
    """A run whose episodes answer micro tasks with the gold patch, no patch or a broken one,
    graded in the sandbox and stored as the rollout lane stores them; returns the episode count."""
    store = open_store(root)
    tasks = generate_micro_tasks(steps * tasks_per_step, seed=11)
    save_corpus(tasks, corpus_dir)
    publish_corpus_table(store, run, str(corpus_dir))
    config = load_config(RunConfig, None, ["--run", run, "--storage.root", root, "--rl.steps", str(steps)])
    runs.record_start(store, run, start_record(config, "rl", str(corpus_dir)))
    total = 0
    with GradingPool(EnvConfig(workers=2)) as grader:
        for step in range(steps):
            chosen = tasks[step * tasks_per_step : (step + 1) * tasks_per_step]
            pairs = [
                (t, _episode(t.instance_id, f"s{step}-t{i}", j, patch))
                for i, t in enumerate(chosen)
                for j, patch in enumerate((t.patch, "", t.patch[: len(t.patch) // 2]))
            ]
            grades = grade_episodes(grader, GradeCache(), pairs)
            table = episodes_table(run, step, [t for t, _ in pairs], [e for _, e in pairs], grades)
            shards.write_shard(store, run, step, "final", table)
            total += table.num_rows
    return total


def _episode(task_id: str, group: str, i: int, patch: str) -> Episode:
    now = datetime.now(UTC)
    return Episode(
        task_id=task_id,
        group_id=group,
        sample_index=i,
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        loss_mask=[True, True],
        completion_logprobs=[-0.1, -0.2],
        policy_versions=[0],
        num_turns=1,
        finish_reason="submitted",
        started_at=now,
        finished_at=now,
        conversation="...",
        patch=patch,
    )


def trained_on_run(root: str, run: str, model, model_dir: Path, steps: int, *trainer_overrides: str) -> None:
    """A run with `steps` steps of episodes from the model itself, its version 0 weights
    (a copy of `model_dir`) and a start record whose trainer settings have `trainer_overrides`."""
    from tests.engines.trainer.rollouts import synthetic_rollouts

    store = open_store(root)
    for step in range(steps):
        shards.write_shard(store, run, step, "final", synthetic_rollouts(model, step=step, seed=step, run=run))
    weights = Path(root) / run / "weights" / "v0"
    shutil.copytree(model_dir, weights)
    checkpoints.publish(store, run, 0, -1, str(weights))
    config = load_config(RunConfig, None, ["--run", run, "--storage.root", root, *trainer_overrides])
    runs.record_start(store, run, start_record(config, "rl", None))


def tree_digest(path: Path) -> dict[str, str]:
    """relative file name -> sha256 of its bytes, for every file under `path`."""
    return {
        str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }
