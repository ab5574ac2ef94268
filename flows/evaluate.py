"""The `evaluate` flow: pass@1 (greedy) and pass@k of a run's newest weights on
the held-out tasks, stored beside the run (its episodes as evaluation `evaluate` of the
run's `evaluations` table) and shown as an artifact."""

from __future__ import annotations

import json

from prefect import flow
from prefect.artifacts import acreate_table_artifact

from engines.env.corpus import load_corpus
from flows.artifacts import slug
from flows.run_config import RunConfig
from flows.runtime import open_rollout_lane, work_dir
from storage.atomic import write_bytes_atomic
from storage.fs import open_store
from tasks.progress import say
from tasks.rollout import evaluate_policy


@flow(name="evaluate", log_prints=True)
async def evaluate(config: RunConfig = RunConfig(), corpus_dir: str | None = None) -> dict:
    store = open_store(config.storage)
    corpus = corpus_dir or config.tasks.corpus_path or str(work_dir(config) / "corpus")
    heldout = [t for t in load_corpus(corpus) if t.split == "heldout"][: config.eval.tasks]
    async with open_rollout_lane(config, store, [], heldout) as lane:
        result = await evaluate_policy(lane, config.eval.samples, "evaluate")
    write_bytes_atomic(store, f"{config.run}/evals/version={result['version']}.json", json.dumps(result).encode())
    shown = {k: v for k, v in result.items() if k != "solved"}  # the solved task ids stay in the stored JSON
    await acreate_table_artifact(
        key=f"{slug(config.run)}-eval", table=[shown], description=f"Held-out evaluation of run {config.run}"
    )
    say("[eval] " + " ".join(f"{k}={v}" for k, v in shown.items()))
    return result
