"""The `rl` flow: a whole asynchronous RL run.

    tasks -> warm start (v0) -> [rollout lane || trainer lane] -> evaluation -> summary

The rollout lane runs here (it owns the vLLM servers); the trainer lane is a
separate flow run in a child process. With `lanes` set, each lane is instead a
deployment picked up by a worker on another machine (flows/lanes_apart.py). They meet only through the lake: the
rollout lane writes step shards, the trainer publishes weight versions, and the
staleness bound decides when the rollout lane may go on. Every start records its
resolved configuration, code version and corpus in the run's `runs` table; re-running
a run with the same name resumes it when the configuration matches the stored one
(flows/resume.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from prefect import flow

from engines.env.task_sources.corpus import TASKS_FILE, load_corpus
from engines.handoff import RunContext, check_bound
from flows.artifacts import publish_step_artifacts, publish_summary
from flows.build_tasks import build_tasks
from flows.comparison import group_rows, heldout_comparison, heldout_groups
from flows.config import RunConfig
from flows.cores_apart import cores_apart
from flows.devices import planned
from flows.lanes_apart import run_lanes_apart
from flows.prefect_setup import ensure_limits
from flows.provenance import start_record
from flows.resume import check_resume
from flows.rollout_lane import evaluated_tasks, rollout_lane
from flows.runtime import corpus_draw, trainer_lane_config
from flows.sft import warm_start
from flows.trainer_lane import TrainerProcess
from storage import runs
from storage.query import connect
from tasks.corpus import prepare_micro_corpus, use_corpus


@flow(name="rl", log_prints=True)
async def rl(config: RunConfig = RunConfig()) -> dict[str, Any]:
    started = time.monotonic()
    ensure_limits(config.run)  # a limit that does not exist would be skipped with only a warning
    context = RunContext.open(config.storage, config.run)  # this process's lake and work folder
    for change in check_resume(context.store, config.run, config, config.allow_config_change):
        print(f"[tandem] resuming {config.run} with a changed configuration: {change}")
    corpus = _prepare_tasks(config, context)
    runs.record_start(context.store, config.run, start_record(config, "rl", corpus))
    v0 = warm_start(config, corpus, context)
    if config.lanes.deployed:
        evals = await run_lanes_apart(config, context, v0)
    else:
        evals = await _lanes_here(config, context, corpus, v0)
    summary = await _summarize(config, context.store, evals, time.monotonic() - started, corpus)
    return summary


async def _lanes_here(config: RunConfig, context: RunContext, corpus: str, v0: str) -> dict[str, Any]:
    """The rollout lane in this process, the trainer lane in a supervised child process
    (a child flow run of this one, started again up to `lanes.max_restarts` times), each
    on its GPUs of this node (the device plan)."""
    config = planned(config)
    work = context.work
    trainer = TrainerProcess(
        trainer_lane_config(config, v0, work / "trainer_state"),
        work / "trainer_lane.json",
        max_restarts=config.lanes.max_restarts,
        metrics=config.metrics,
    )
    with cores_apart(trainer.cores):  # the rollout side (and the servers it starts) off the trainer's cores
        lanes = [asyncio.create_task(rollout_lane(config, corpus, context)), asyncio.create_task(trainer.run())]
        try:
            done, _ = await asyncio.wait(lanes, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()  # a failed lane fails the run (and cancels the other below)
            await asyncio.gather(*lanes)
        finally:
            for t in lanes:
                t.cancel()
            await trainer.stop()
    return lanes[0].result()


def _prepare_tasks(config: RunConfig, context: RunContext) -> str:
    t, store, corpus_dir = config.tasks, context.store, str(context.work / "corpus")
    if t.kind == "corpus" and t.build is not None and not (Path(t.corpus_path) / TASKS_FILE).is_file():
        build_tasks(t.corpus_path, t.build.build_config(config.env))  # resumable and cached by content
    if t.kind == "corpus":
        return use_corpus(store, config.run, t.corpus_path, corpus_dir, corpus_draw(config))
    return prepare_micro_corpus(store, config.run, corpus_dir, t.train_tasks, t.heldout_tasks, t.seed)


async def _summarize(config: RunConfig, store, evals: dict, wall_s: float, corpus: str) -> dict[str, Any]:
    lake = connect(store, config.run)
    steps = lake.sql("SELECT * EXCLUDE (extra) FROM steps ORDER BY step").fetch_arrow_table().to_pylist()
    staleness = lake.sql("SELECT max(step - min_policy_version) FROM rollouts").fetchall()[0][0] or 0
    check_bound(staleness, config.rl.async_level)
    before, after = evals["before"], evals["after"]
    summary = {
        "run": config.run,
        "steps": len(steps),
        "async_level": config.rl.async_level,
        "staleness_max": staleness,
        **heldout_comparison(before, after, config.eval.samples),
        **group_rows(before, after, heldout_groups(evaluated_tasks(load_corpus(corpus), config.eval.tasks))),
        "wall minutes": round(wall_s / 60, 1),
    }
    done = evals["steps"]  # the steps this invocation rolled out (all of them unless resumed)
    if done:
        summary["rl loop s"] = round(evals["loop_s"], 1)
        summary["steps per hour"] = round(3600 * len(done) / evals["loop_s"], 1)
        summary["prefect overhead"] = round(sum(m["prefect_s"] for m in done) / sum(m["wall_s"] for m in done), 4)
        # Which stage bounds the loop: a rollout step's own work, and its wait for a
        # fresh-enough policy (the trainer's time that the staleness bound did not hide).
        summary["rollout s per step"] = round(sum(m["task_s"] - m["wait_s"] for m in done) / len(done), 2)
        summary["wait for trainer s per step"] = round(sum(m["wait_s"] for m in done) / len(done), 2)
        summary["cpu busy share"] = evals["cpu_busy"]  # of all cores during the RL loop
    if steps:
        await publish_step_artifacts(config.run, steps, before.get("pass@1"), after.get("pass@1"))
    markdown = await publish_summary(config.run, store.display, summary)
    print(markdown)
    return summary
