"""The `evaluate` flow: pass@1 (greedy) and pass@k of a run's newest weights on
the held-out tasks, stored beside the run (its episodes as evaluation `evaluate` of the
run's `evaluations` table) and shown as an artifact.

The run is `run` when given (a name, or `newest`: the rl run that started last, as
the nightly schedule asks), else `config.run`. Its held-out tasks come from
`corpus_dir`, else `tasks.corpus_path`, else the corpus the run recorded at its
start. A run without published weights is refused by name before any server starts.
"""

from __future__ import annotations

import json

from prefect import flow
from prefect.artifacts import acreate_table_artifact

from engines.env.corpus import load_corpus
from flows.artifacts import slug
from flows.config import RunConfig
from flows.replay_source import require_weights, resolve_run
from flows.runtime import open_rollout_lane, work_dir
from storage import runs
from storage.atomic import write_bytes_atomic
from storage.fs import open_store
from tasks.progress import say
from tasks.rollout import evaluate_policy


@flow(name="evaluate", log_prints=True)
async def evaluate(config: RunConfig = RunConfig(), corpus_dir: str | None = None, run: str | None = None) -> dict:
    """Held-out pass@1 and pass@k of a run's newest weights.

    Args:
        config: Evaluation, inference and lake settings (`eval.tasks`, `eval.samples`, `storage.root`).
        corpus_dir: The corpus whose held-out tasks are evaluated; default: the one the run recorded.
        run: The run to evaluate, or `newest` (the rl run that started last); default: `config.run`.
    """
    store = open_store(config.storage)
    if run is not None:
        config = config.model_copy(update={"run": resolve_run(store, run)})
    weights = require_weights(store, config.run)
    say(f"[eval] run {config.run}: version {weights.version} ({weights.uri})")
    corpus = corpus_dir or config.tasks.corpus_path or _recorded_corpus(store, config)
    heldout = [t for t in load_corpus(corpus) if t.split == "heldout"][: config.eval.tasks]
    if not heldout:
        raise ValueError(f"corpus_dir: {corpus} has no held-out tasks; give the corpus run {config.run!r} used")
    async with open_rollout_lane(config, store, [], heldout) as lane:
        result = await evaluate_policy(lane, config.eval.samples, "evaluate")
    write_bytes_atomic(store, f"{config.run}/evals/version={result['version']}.json", json.dumps(result).encode())
    shown = {k: v for k, v in result.items() if k != "solved"}  # the solved task ids stay in the stored JSON
    await acreate_table_artifact(
        key=f"{slug(config.run)}-eval", table=[shown], description=f"Held-out evaluation of run {config.run}"
    )
    say("[eval] " + " ".join(f"{k}={v}" for k, v in shown.items()))
    return {"run": config.run, **result}


def _recorded_corpus(store, config: RunConfig) -> str:
    """The corpus directory the run's newest start recorded, else the run's work folder's."""
    start = runs.latest_start(store, config.run) or {}
    return start.get("corpus_path") or str(work_dir(config) / "corpus")
