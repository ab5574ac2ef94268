"""Does RL teach what more demonstrations do not? RL against continued SFT, from one
warm start, on the same held-out tasks.

  (a) rl  : the default run (warm start = version 0, asynchronous RL for rl.steps,
            held-out evaluation before and after, same protocol and decoding)
  (b) sft : from the same version 0, SFT on demonstrations of the same kind (trainer.sft.demonstrations) of fresh training
            tasks (same generator and protocol, failed attempts shown and masked as in
            the warm start) for the wall time of (a)'s RL loop, then the same
            held-out evaluation
  (c) oracle sft: as (b), on the oracle's fixes (demonstrations = "oracle"): what the
            same time of supervision with the answers reaches, for reference

Reported: rl_gain_points, sft_gain_points and oracle_sft_points (held-out greedy pass@1
over the warm start, in points), p_value (exact McNemar, RL after vs before, paired by task),
p_value_sft (the same for SFT), heldout_tasks, and the seconds each arm trained; and
rl_gain_interval (95% paired bootstrap over tasks, in points).

On a corpus (`--config configs/repos.toml`, or tasks.kind = corpus among --run-args) the
held-out tasks are of two kinds, reported apart, each with its interval and p: held-out
projects (code never trained on: rl_gain_points and sft_gain_points are theirs) and
held-out tasks of training projects (`heldout_tasks` figures). Arm (b) then trains on the
repository demonstrator's episodes of the training tasks in fresh orders; arm (c) has no
oracle demonstrator on real code and is left out.

--quick measures one learning design cheaply: arm (a) only, on the first QUICK_HELDOUT
held-out tasks, for QUICK_STEPS RL steps, from the cached warm start
(engines/trainer/warm_start_cache.py).
Either mode appends a row to the `experiments` table of the lake at --experiments
(default $TANDEM_ROOT, else ./runs: where `tandem query` looks), so
`tandem query "SELECT name, figures FROM experiments"` lists every design tried.

    python -m benchmarks.learning [--config configs/repos.toml] [--quick] [--name NAME] [--seed 0]
        [--run-args --rl.steps 40 ...]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engines.env.task_sources.corpus import load_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.task_sources.micro_demos import DemonstrationKind, warm_start_demonstrations
from engines.env.task_sources.renamed_demos import renamed_share
from engines.model.load import local_model_dir
from engines.rollout.attempts import mcnemar_p, paired_bootstrap_interval
from engines.trainer.sft import sft
from flows.comparison import heldout_groups
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.evaluate import evaluate
from flows.prefect_api import prefect_api
from flows.provenance import code_version
from flows.rl import rl
from flows.rollout_lane import evaluated_tasks
from flows.runtime import work_dir
from storage import checkpoints, tables
from storage.fs import open_store
from storage.query import connect
from tasks.training import repository_demonstrations

_FRESH_SEED_OFFSET = 1000  # train tasks use seed, held-out seed + 1: fresh ones use neither
_FRESH_TASKS = 8000
# From LEARNING.md's timings on 2 cores (70-81 s per RL step with edit feedback, about 2
# minutes per evaluation pass of 200 tasks), --quick takes about 20 minutes once the warm
# start is cached: 10 steps and 4 passes (greedy and sampled, before and after).
QUICK_STEPS = 10  # RL steps of --quick: design E's 12 steps moved greedy pass@1 by 4 points
QUICK_HELDOUT = 200  # held-out tasks of --quick: a 10-point gain's 95% interval is about +-6 points


def fresh_demonstrations(config: RunConfig, kind: DemonstrationKind) -> list[list[dict]]:
    """Demonstrations the warm start did not see: of fresh micro tasks, or on a corpus the
    repository demonstrator's episodes of the run's training tasks in other orders (and
    names, with trainer.sft.renamed_share), drawn by a seed the warm start did not use."""
    seed = config.tasks.seed + _FRESH_SEED_OFFSET
    if config.tasks.kind == "corpus":
        train = [t for t in load_corpus(str(work_dir(config) / "corpus")) if t.split == "train"]
        sft = config.trainer.sft
        demos = repository_demonstrations(
            train, config.env.edit_attempts, seed, config.env, sft.demonstrations_per_task, sft.old_tokens
        )
        return renamed_share(demos, sft.renamed_share, seed)
    fresh = generate_micro_tasks(_FRESH_TASKS, seed=seed)
    return warm_start_demonstrations(
        fresh,
        config.env.edit_attempts,
        config.trainer.sft.failed_attempt_share,
        seed=seed,
        tool=config.trainer.sft.edit_tool,
        kind=kind,
    )


def continued_sft(config: RunConfig, v0: str, seconds: float, out: Path, kind: DemonstrationKind) -> Path:
    """SFT from `v0` for `seconds` on fresh demonstrations of `kind`, at the learning rate
    the warm start's cosine ended on (continuing it, not restarting it)."""
    demos = fresh_demonstrations(config, kind)
    sft_cfg = config.trainer.sft.model_copy(
        update={
            "lr": config.trainer.sft.lr * 0.1,
            "warmup_steps": 0,
            "schedule": "constant",
            "max_steps": None,
            "max_seconds": seconds,
        }
    )
    trainer = config.trainer.model_copy(update={"sft": sft_cfg})
    return sft(str(local_model_dir(v0)), demos, str(out), trainer)


def rl_wall_seconds(store, run: str) -> float:
    """The RL loop's wall time from the lake: first episode started to last weights
    published (so a resumed or reused run is timed as it ran)."""
    lake = connect(store, run)
    start = lake.sql("SELECT min(started_at) FROM rollouts").fetchall()[0][0]
    end = lake.sql("SELECT max(created_at) FROM checkpoints").fetchall()[0][0]
    return (end - start).total_seconds()


def paired_outcomes(before: dict, after: dict) -> tuple[list[bool], list[bool]]:
    """Greedy resolved before and after, one pair per evaluated task: the tasks neither
    solved are in no `solved` list, so they are added as concordant failures."""
    ids = sorted(set(before["solved"]) | set(after["solved"]))
    unsolved = [False] * (after["tasks"] - len(ids))
    return [i in before["solved"] for i in ids] + unsolved, [i in after["solved"] for i in ids] + unsolved


def paired_p(before: dict, after: dict) -> float:
    return mcnemar_p(*paired_outcomes(before, after))


def group_figures(before: dict, after: dict, ids: list[str]) -> dict[str, Any]:
    """Greedy pass@1 before and after on the held-out tasks `ids`, the gain in points
    with its 95% paired-bootstrap interval, and McNemar's p."""
    was, now = [i in before["solved"] for i in ids], [i in after["solved"] for i in ids]
    low, high = paired_bootstrap_interval(was, now)
    return {
        "tasks": len(ids),
        "pass_at_1_before": round(sum(was) / len(ids), 4),
        "pass_at_1_after": round(sum(now) / len(ids), 4),
        "gain_points": round(100 * (sum(now) - sum(was)) / len(ids), 1),
        "gain_interval_points": [round(100 * low, 1), round(100 * high, 1)],
        "p_value": float(f"{mcnemar_p(was, now):.3g}"),
    }


def corpus_groups(config: RunConfig) -> dict[str, list[str]]:
    """The evaluated held-out task ids of a corpus run by kind: "heldout_projects" and
    "heldout_tasks" (of training projects); empty for a micro run."""
    if config.tasks.kind != "corpus":
        return {}
    evaluated = evaluated_tasks(load_corpus(str(work_dir(config) / "corpus")), config.eval.tasks)
    groups = heldout_groups(evaluated)
    return {
        "heldout_projects": groups["held-out projects"],
        "heldout_tasks": groups["held-out tasks of training projects"],
    }


def split_figures(before: dict, after: dict, groups: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """group_figures of each non-empty group."""
    return {name: group_figures(before, after, ids) for name, ids in groups.items() if ids}


def gain_figures(before: dict, after: dict) -> dict[str, Any]:
    """The experiment's figures: greedy and first-attempt pass@1 before and after, the
    gain in points with its 95% paired-bootstrap interval, McNemar's p."""
    low, high = paired_bootstrap_interval(*paired_outcomes(before, after))
    return {
        "pass_at_1_before": before["pass@1"],
        "pass_at_1_after": after["pass@1"],
        "first_attempt_before": before["first_attempt_pass@1"],
        "first_attempt_after": after["first_attempt_pass@1"],
        "gain_points": round(100 * (after["pass@1"] - before["pass@1"]), 1),
        "gain_interval_points": [round(100 * low, 1), round(100 * high, 1)],
        "p_value": float(f"{paired_p(before, after):.3g}"),
        "heldout_tasks": after["tasks"],
    }


def record_experiment(
    root: str, name: str, settings: dict[str, Any], figures: dict[str, Any], started_at: datetime, wall_s: float
) -> str:
    """Append the experiment's row to the `experiments` table of the lake at `root`."""
    row = {
        "name": name,
        "settings": json.dumps(settings, sort_keys=True),
        "figures": json.dumps(figures, sort_keys=True),
        "code_version": code_version(),
        "started_at": started_at,
        "wall_s": round(wall_s, 1),
    }
    return tables.append_experiment(open_store(root), row)


def main() -> None:
    args = parse_args()
    started_at, start = datetime.now(UTC), time.monotonic()
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-learning-"))
    mode = "quick" if args.quick else "full"
    quick = ["--eval.tasks", str(QUICK_HELDOUT), "--rl.steps", str(QUICK_STEPS)] if args.quick else []
    overrides = [
        "--run",
        f"learning-{'quick' if args.quick else 'rl'}-{args.seed}",
        "--storage.root",
        str(root / "lake"),
        "--tasks.seed",
        str(args.seed),
        "--rl.seed",
        str(args.seed),
        *quick,  # before the user's overrides, which win
        *args.run_args,
    ]
    config = load_config(RunConfig, args.config, overrides)
    with prefect_api(root / "prefect"):
        asyncio.run(rl(config))
        store = open_store(config.storage)
        evals = {
            name: json.loads(store.fs.cat_file(store.path(f"{config.run}/evals/{name}.json")))
            for name in ("before", "after")
        }
        rl_seconds = rl_wall_seconds(store, config.run)
        sft_arms = {} if args.quick else sft_arms_for(config, store, rl_seconds, root, args.seed)
    before, after = evals["before"], evals["after"]
    figures = gain_figures(before, after)
    groups = corpus_groups(config)
    by_group = split_figures(before, after, groups)
    # On a corpus the headline is the projects never trained on (all held-out tasks otherwise).
    head = by_group.get("heldout_projects", figures) if groups else figures
    result = {
        "bench": "learning",
        "mode": mode,
        "rl_gain_points": head["gain_points"],
        "rl_gain_interval": head["gain_interval_points"],
        "p_value": head["p_value"],
        **({"rl_by_split": by_group, "rl_gain_points_all": figures["gain_points"]} if groups else {}),
        "heldout_tasks": after["tasks"],
        "pass_at_1_warm_start": before["pass@1"],
        "pass_at_1_rl": after["pass@1"],
        "first_attempt_warm_start": before["first_attempt_pass@1"],
        "first_attempt_rl": after["first_attempt_pass@1"],
        "rl_train_s": round(rl_seconds, 1),
        "seed": args.seed,
    }
    # (arm, the key of its gain, the prefix of its other figures)
    for arm, gain_key, prefix in (("sft", "sft_gain_points", "sft"), ("oracle", "oracle_sft_points", "oracle_sft")):
        if arm in sft_arms:
            arm_figures = sft_arm_figures(before, sft_arms[arm], gain_key, prefix, groups.get("heldout_projects"))
            result.update(arm_figures)
            figures.update({k: arm_figures[k] for k in (gain_key, f"pass_at_1_{prefix}")})
    if groups:
        figures["by_split"] = by_group
    settings = {
        "mode": mode,
        "seed": args.seed,
        "config_file": args.config,
        "run_args": args.run_args,
        "lake": str(root / "lake"),
        "runs": [config.run] + [arm["run"] for arm in sft_arms.values()],
        "config": json.loads(config.model_dump_json()),
    }
    wall_s = time.monotonic() - start
    record_experiment(args.experiments, args.name or f"learning-{mode}", settings, figures, started_at, wall_s)
    print(
        f"[learning] greedy pass@1 {before['pass@1']:.3f} -> {after['pass@1']:.3f} on {after['tasks']} tasks: "
        f"gain {figures['gain_points']:+.1f} points, 95% interval {figures['gain_interval_points']}, "
        f"McNemar p {figures['p_value']}; row appended to {args.experiments}/experiments"
    )
    for name, group in by_group.items():
        print(
            f"[learning] {name}: greedy pass@1 {group['pass_at_1_before']:.3f} -> {group['pass_at_1_after']:.3f} on "
            f"{group['tasks']} tasks, gain {group['gain_points']:+.1f} points {group['gain_interval_points']}, "
            f"McNemar p {group['p_value']}"
        )
    print(json.dumps(result))


def sft_arm_figures(
    before: dict, arm: dict[str, Any], gain_key: str, prefix: str, ids: list[str] | None = None
) -> dict[str, Any]:
    """An SFT arm's figures against the warm start: its gain in points (`gain_key`), McNemar's
    p, greedy and first-attempt pass@1 and its training seconds. With `ids` (a corpus's
    held-out projects) the gain, p and pass@1 are those tasks'."""
    after = arm["eval"]
    if ids:
        group = group_figures(before, after, ids)
        gain, p, passed = group["gain_points"], group["p_value"], group["pass_at_1_after"]
    else:
        gain, p, passed = round(100 * (after["pass@1"] - before["pass@1"]), 1), paired_p(before, after), after["pass@1"]
    return {
        gain_key: gain,
        f"p_value_{prefix}": float(f"{p:.3g}"),
        f"pass_at_1_{prefix}": passed,
        f"first_attempt_{prefix}": after["first_attempt_pass@1"],
        f"{prefix}_train_s": round(arm["seconds"], 1),
    }


def sft_arms_for(config: RunConfig, store, rl_seconds: float, root: Path, seed: int) -> dict[str, dict[str, Any]]:
    """Arms (b) and (c): "sft" on the warm start's own kind of demonstrations, and
    "oracle" on the oracle's fixes (the same arm as (b) when the warm start's are the oracle's)."""
    arms = {"sft": continued_sft_arm(config, store, rl_seconds, root, seed, config.trainer.sft.demonstrations)}
    if config.tasks.kind == "corpus":  # no oracle demonstrator writes real code's fixes
        return arms
    if config.trainer.sft.demonstrations == "oracle":
        arms["oracle"] = arms["sft"]
    else:
        arms["oracle"] = continued_sft_arm(config, store, rl_seconds, root, seed, "oracle")
    return arms


def continued_sft_arm(
    config: RunConfig, store, rl_seconds: float, root: Path, seed: int, kind: DemonstrationKind
) -> dict[str, Any]:
    """Continued SFT on `kind` demonstrations from version 0 for the RL loop's wall time, then evaluated."""
    v0 = checkpoints.get(store, config.run, 0).uri
    start = time.monotonic()
    sft_dir = continued_sft(config, v0, rl_seconds, root / f"sft-continued-{kind}", kind)
    seconds = time.monotonic() - start
    sft_run = config.model_copy(update={"run": f"learning-sft-{kind}-{seed}"})
    checkpoints.publish(store, sft_run.run, 0, -1, str(sft_dir))
    result = asyncio.run(evaluate(sft_run, str(work_dir(config) / "corpus")))
    return {"eval": result, "seconds": seconds, "run": sft_run.run}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="the run's recipe, as for `tandem run --config` (e.g. configs/repos.toml)")
    parser.add_argument("--seed", type=int, default=0, help="tasks.seed and rl.seed of the run")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"RL arm only: {QUICK_HELDOUT} held-out tasks, {QUICK_STEPS} RL steps, the cached warm start",
    )
    parser.add_argument("--name", help="the experiment's name in the experiments table (default: learning-<mode>)")
    parser.add_argument(
        "--experiments",
        default=os.environ.get("TANDEM_ROOT", "runs"),
        help="lake root whose experiments table gets this run's row (default: $TANDEM_ROOT, else ./runs)",
    )
    parser.add_argument(
        "--root",
        help="working folder (default: a new temporary one); a finished RL run already "
        "there is reused as arm (a), timed from its lake",
    )
    parser.add_argument(
        "--run-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="overrides for the RL run, as for `tandem run` (e.g. --rl.steps 40)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
