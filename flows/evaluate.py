"""The `evaluate` flow: pass@1 (greedy) and pass@k of a run's newest weights on
the held-out tasks, stored beside the run (its episodes as evaluation `evaluate` of the
run's `evaluations` table) and shown as an artifact.

The run is `run` when given (a name, or `newest`: the rl run that started last, as
the nightly schedule asks), else `config.run`. Its held-out tasks come from
`corpus_dir`, else the corpus the run recorded at its start (for a corpus run, its
own draw with its hint), else `tasks.corpus_path`. A run without published weights is refused by name before any server starts.

The policy is asked as it was trained: the `inference` and `env` settings come from the
configuration the run stored at its newest start (the `runs` table), except the keys the
caller sets explicitly (`--inference.sampling.temperature 0.5`, a config file's keys,
a deployment's parameters) and where the evaluation runs (CALLERS_OWN: servers, ports,
logs, sandbox paths, workers), which stay the caller's. A replay-train run's settings
are its source run's.
"""

from __future__ import annotations

import json
from typing import Any

from prefect import flow
from prefect.artifacts import acreate_table_artifact

from engines.env.task_sources.corpus import load_corpus
from engines.handoff import RunContext
from flows.artifacts import slug
from flows.config import RunConfig, RunEnvConfig, RunInferenceConfig
from flows.config_loader import _model_of
from flows.replay_source import require_weights, resolve_run
from flows.rollout_lane import evaluated_tasks
from flows.runtime import open_rollout_lane
from storage import runs
from storage.atomic import write_bytes_atomic
from storage.fs import Store, open_store
from tasks.progress import say
from tasks.rollout import evaluate_policy


@flow(name="evaluate", log_prints=True)
async def evaluate(config: RunConfig = RunConfig(), corpus_dir: str | None = None, run: str | None = None) -> dict:
    """Held-out pass@1 and pass@k of a run's newest weights.

    Args:
        config: Evaluation and lake settings (`eval.tasks`, `eval.samples`, `storage.root`); its inference and
            env keys set explicitly override the run's stored ones.
        corpus_dir: The corpus whose held-out tasks are evaluated; default: the one the run recorded.
        run: The run to evaluate, or `newest` (the rl run that started last); default: `config.run`.
    """
    store = open_store(config.storage)
    if run is not None:
        config = config.model_copy(update={"run": resolve_run(store, run)})
    config = with_stored_settings(config, stored_config(store, config.run))
    weights = require_weights(store, config.run)
    say(f"[eval] run {config.run}: version {weights.version} ({weights.uri})")
    context = RunContext.open(config.storage, config.run, store)  # the evaluated run's lake and work folder
    corpus = corpus_dir or _recorded_corpus(context, config)
    heldout = evaluated_tasks(load_corpus(corpus), config.eval.tasks)
    if not heldout:
        raise ValueError(f"corpus_dir: {corpus} has no held-out tasks; give the corpus run {config.run!r} used")
    async with open_rollout_lane(config, context, [], heldout) as lane:
        result = await evaluate_policy(lane, config.eval.samples, "evaluate")
    write_bytes_atomic(store, f"{config.run}/evals/version={result['version']}.json", json.dumps(result).encode())
    shown = {k: v for k, v in result.items() if k != "solved"}  # the solved task ids stay in the stored JSON
    await acreate_table_artifact(
        key=f"{slug(config.run)}-eval", table=[shown], description=f"Held-out evaluation of run {config.run}"
    )
    say("[eval] " + " ".join(f"{k}={v}" for k, v in shown.items()))
    return {"run": config.run, **result}


# Where and on what the evaluation runs, not how the policy is asked or judged: these
# keep the caller's values (a stored server URL may be another run's server now).
CALLERS_OWN: dict[str, frozenset[str]] = {
    "inference": frozenset(
        {
            "model_dir",
            "server_urls",
            "num_servers",
            "host",
            "base_port",
            "served_model_name",
            "kv_cache_gb",
            "max_num_seqs",
            "block_size",
            "concurrency_per_server",
            "coalesce_window_ms",
            "enforce_eager",
            "server_threads",
            "startup_timeout_s",
            "request_timeout_s",
            "connect_timeout_s",
            "max_retries",
            "max_restarts",
            "weight_update",
            "worker_extension",
            "verify_checksums",
            "log_dir",
            "cluster",
            "weight_cache_versions",
        }
    ),
    "env": frozenset(
        {
            "backend",
            "allow_unsandboxed",
            "bwrap_path",
            "use_cgroups",
            "cgroup_root",
            "python",
            "workers",
            "warm_pytest",
            "scratch_dir",
        }
    ),
}


def stored_config(store: Store, run: str) -> dict[str, Any] | None:
    """The configuration run `run` stored at its newest start (a replay-train run: its
    source run's, which holds the inference and env settings), or None without one."""
    start = runs.latest_start(store, run)
    config = json.loads(start["config"]) if start and start.get("config") else None
    if config is not None and "inference" not in config and start.get("source_run"):
        return stored_config(store, start["source_run"]) if start["source_run"] != run else None
    return config


def with_stored_settings(config: RunConfig, stored: dict[str, Any] | None) -> RunConfig:
    """`config` with its `inference` and `env` sections taken from `stored` (a run's
    stored configuration), except the keys set explicitly in `config` and CALLERS_OWN.
    Keys the stored configuration has that this version does not know are dropped
    (a run stored by another version), with a line naming them."""
    if not stored:
        say(f"[eval] run {config.run}: no stored configuration; inference and env settings as given")
        return config
    update: dict[str, Any] = {}
    dropped: list[str] = []
    overridden: list[str] = []
    for section, model in (("inference", RunInferenceConfig), ("env", RunEnvConfig)):
        given = getattr(config, section)
        base = given.model_dump()
        base |= {k: v for k, v in stored.get(section, {}).items() if k not in CALLERS_OWN[section]}
        explicit = explicit_fields(given)
        overridden += _dotted(explicit, section)
        update[section] = model.model_validate(_deep_update(_known(model, base, section, dropped), explicit))
    given_keys = f", except {', '.join(sorted(overridden))} as given" if overridden else ""
    say(f"[eval] run {config.run}: inference and env settings as the run stored them{given_keys}")
    if dropped:
        say(f"[eval] stored settings this version does not know, not used: {', '.join(sorted(dropped))}")
    return config.model_copy(update=update)


def explicit_fields(model: Any) -> dict[str, Any]:
    """The fields of a pydantic model set explicitly (by the caller, a file or a
    parameter; not by default), nested models as their own explicit fields."""
    out: dict[str, Any] = {}
    for name in model.model_fields_set:
        value = getattr(model, name)
        out[name] = explicit_fields(value) if hasattr(value, "model_fields_set") else value
    return out


def _dotted(fields: dict[str, Any], prefix: str) -> list[str]:
    """Dotted names of the leaves of nested `fields`."""
    names = []
    for key, value in fields.items():
        names += _dotted(value, f"{prefix}.{key}") if isinstance(value, dict) and value else [f"{prefix}.{key}"]
    return names


def _known(model: Any, data: dict[str, Any], prefix: str, dropped: list[str]) -> dict[str, Any]:
    """`data` without the keys `model` has no field for (their dotted names to `dropped`)."""
    out = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            dropped.append(f"{prefix}.{key}")
            continue
        nested = _model_of(field.annotation)
        out[key] = _known(nested, value, f"{prefix}.{key}", dropped) if nested and isinstance(value, dict) else value
    return out


def _deep_update(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s values, nested dicts merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _deep_update(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _recorded_corpus(context: RunContext, config: RunConfig) -> str:
    """The corpus directory the run's newest start recorded (a corpus run's own draw, its
    statements carrying the run's hint), else `tasks.corpus_path`, else the run's work folder's."""
    start = runs.latest_start(context.store, config.run) or {}
    return start.get("corpus_path") or config.tasks.corpus_path or str(context.work / "corpus")
