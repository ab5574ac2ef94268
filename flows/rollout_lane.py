"""The rollout lane: one flow run that owns the vLLM servers. It evaluates the
starting policy, then for each step waits for a fresh-enough policy, loads it,
generates + grades + writes the step's shard, updates the run's step table and
reward curve artifacts, and finally evaluates the last policy. Resumable: a step whose shard exists is skipped, an evaluation already
stored is not redone."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psutil
from prefect import flow

from engines.env.task_sources.corpus import load_corpus
from engines.env.types import Task
from engines.handoff import RunContext
from engines.rollout.lane import RolloutLane
from flows.artifacts import publish_step_artifacts
from flows.config import RunConfig
from flows.metrics import MetricsSink
from flows.runtime import open_rollout_lane
from flows.sinks import metrics_sink
from storage.atomic import write_bytes_atomic
from storage.fs import Store
from tasks.limits import rollout_limit
from tasks.progress import say
from tasks.rollout import evaluate_policy, load_final_policy, retain_weights, rollout_step
from tasks.slots import held_slot


def evaluated_tasks(tasks: list[Task], count: int) -> list[Task]:
    """The held-out tasks both evaluations run: the first `count` of the corpus's held-out split."""
    return [t for t in tasks if t.split == "heldout"][:count]


@flow(name="rollout-lane", log_prints=True)
async def rollout_lane(config: RunConfig, corpus_dir: str, context: RunContext) -> dict[str, Any]:
    """`context`: the run's lake and work folder, as the process that runs the lane opened them."""
    tasks = load_corpus(corpus_dir)
    train = [t for t in tasks if t.split == "train"]
    heldout = evaluated_tasks(tasks, config.eval.tasks)
    # One rollout lane per run, for its whole life (a slot taken per step waited about
    # 2 s each time on Prefect's slot accounting).
    async with (
        held_slot(rollout_limit(config.run)),
        open_rollout_lane(config, context, train, heldout) as lane,
    ):
        sink = metrics_sink(config.metrics, "rollout", config.run, context.work, config.model_dump(mode="json"))
        try:
            before = await _evaluation(lane, config, "before", 0, sink)
            loop_start, cpu_start = time.monotonic(), psutil.cpu_times()
            steps = await _run_steps(lane, config, sink, before.get("pass@1"))
            await load_final_policy(lane, config.rl.steps)  # the trainer's last publication
            await _retain(lane, config)
            loop_s = time.monotonic() - loop_start
            cpu_busy = busy_share(cpu_start, psutil.cpu_times())
            after = await _evaluation(lane, config, "after", config.rl.steps, sink)
        finally:
            if sink is not None:
                sink.close()
    return {"before": before, "after": after, "steps": steps, "loop_s": loop_s, "cpu_busy": cpu_busy}


def busy_share(start: tuple[float, ...], end: tuple[float, ...]) -> float:
    """Share of the machine's CPU time (all cores, every process) that was busy between
    two psutil.cpu_times() readings: how much idle capacity overlap could still use."""
    idle = lambda t: t.idle + getattr(t, "iowait", 0.0)  # noqa: E731 - iowait exists on Linux only
    total = sum(end) - sum(start)
    return round(1 - (idle(end) - idle(start)) / total, 3) if total > 0 else 0.0


async def _run_steps(
    lane: RolloutLane, config: RunConfig, sink: MetricsSink | None, before: float | None = None
) -> list[dict]:
    """Roll out every step not yet published; `before` (held-out greedy pass@1 before RL)
    is marked on the curve published after each step."""
    results = []
    published = [step for step in range(config.rl.steps) if lane.is_published(step)]
    if published:
        say(f"[rollout] resuming run {config.run}: {len(published)} of {config.rl.steps} steps are in the lake")
    for step in range(config.rl.steps):
        if step in published:
            continue  # written before a restart: shards are never duplicated
        t0 = time.monotonic()
        metrics = await rollout_step(lane, step)
        wall = time.monotonic() - t0
        # What the step spent outside the task's body is Prefect's own cost.
        metrics.update(step=step, wall_s=wall, prefect_s=wall - metrics["task_s"])
        results.append(metrics)
        if sink is not None:
            sink.log(step, metrics, "rollout")
        say(f"[rollout] step {step + 1}/{config.rl.steps} " + step_line(metrics))
        await publish_step_artifacts(config.run, results, before)  # watchable in the UI as the run goes
        await _retain(lane, config)  # as the run goes: a long run must not end on a full disk
    return results


def step_line(m: dict[str, Any]) -> str:
    """A rollout step's metrics on one line (no reward when every episode failed in the
    harness; the hack rate only when an episode was flagged, so it stands out)."""
    number = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    hacks = f" hack={m['hack_rate']:.3f}" if m.get("hack_rate") else ""
    return (
        f"v{m['policy_version']} reward={number(m['reward_mean'])} pass={number(m['pass_rate'])}{hacks} "
        f"gen={m['generation_s']:.1f}s grade={m['grading_s']:.1f}s update={m['weight_update_s']:.1f}s "
        f"wait={m['wait_s']:.1f}s tokens={m['completion_tokens']}"
    )


async def _retain(lane: RolloutLane, config: RunConfig) -> None:
    dropped = await retain_weights(lane, config.retention.last(config.rl.async_level), config.retention.milestone_every)
    if dropped:
        print(f"[rollout] weight versions deleted by retention: {dropped}")


async def _evaluation(lane: RolloutLane, config: RunConfig, name: str, step: int, sink: MetricsSink | None) -> dict:
    """Evaluate the served policy once per (run, name); stored as JSON beside the run, and
    a row of the trackers' evaluation table at `step` (once: not again on a resume)."""
    store, path = lane.store, f"{config.run}/evals/{name}.json"
    stored = await asyncio.to_thread(_stored_evaluation, store, path)
    if stored is not None:
        return stored
    result = await evaluate_policy(lane, config.eval.samples, name)
    await asyncio.to_thread(write_bytes_atomic, store, path, json.dumps(result).encode())
    if sink is not None:
        sink.log_evaluation(step, name, result)
    shown = {k: v for k, v in result.items() if k != "solved"}  # the solved task ids are for paired tests
    say(f"[eval] {name}: " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
    return result


def _stored_evaluation(store: Store, path: str) -> dict | None:
    """The evaluation stored at `path` under the lake, if there is one."""
    full = store.path(path)
    if not store.call(f"check {path}", lambda: store.fs.exists(full)):
        return None
    return json.loads(store.call(f"read {path}", lambda: store.fs.cat_file(full)))
