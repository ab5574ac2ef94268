"""Does RL teach what more demonstrations do not? RL against continued SFT, from one
warm start, on the same held-out tasks.

  (a) rl  : the default run (warm start = version 0, asynchronous RL for rl.steps,
            held-out evaluation before and after, same protocol and decoding)
  (b) sft : from the same version 0, SFT on oracle demonstrations of fresh training
            tasks (same generator and protocol, failed attempts shown and masked as in
            the warm start) for the wall time of (a)'s RL loop, then the same
            held-out evaluation

Reported: rl_gain_points and sft_gain_points (held-out greedy pass@1 over the warm
start, in points), p_value (exact McNemar, RL after vs before, paired by task),
p_value_sft (the same for SFT), heldout_tasks, and the seconds each arm trained.

    python -m benchmarks.learning [--seed 0] [--run-args --rl.steps 40 ...]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from engines.env.micro import generate_micro_tasks
from engines.env.micro_demos import feedback_demonstrations
from engines.model.load import local_model_dir
from engines.rollout.attempts import mcnemar_p
from engines.trainer.sft import sft
from flows.config import load_config
from flows.evaluate import evaluate
from flows.prefect_api import prefect_api
from flows.rl import rl
from flows.run_config import RunConfig
from flows.runtime import work_dir
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect

_FRESH_SEED_OFFSET = 1000  # train tasks use seed, held-out seed + 1: fresh ones use neither
_FRESH_TASKS = 8000


def continued_sft(config: RunConfig, v0: str, seconds: float, out: Path) -> Path:
    """SFT from `v0` for `seconds` on fresh demonstrations, at the learning rate the
    warm start's cosine ended on (continuing it, not restarting it)."""
    fresh = generate_micro_tasks(_FRESH_TASKS, seed=config.tasks.seed + _FRESH_SEED_OFFSET)
    demos = feedback_demonstrations(
        fresh,
        config.env.edit_attempts,
        config.trainer.sft.failed_attempt_share,
        seed=config.tasks.seed + _FRESH_SEED_OFFSET,
        tool=config.trainer.sft.edit_tool,
    )
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


def paired_p(before: dict, after: dict) -> float:
    ids = sorted(set(before["solved"]) | set(after["solved"]))
    return mcnemar_p([i in before["solved"] for i in ids], [i in after["solved"] for i in ids])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="tasks.seed and rl.seed of the run")
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
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-learning-"))
    overrides = [
        "--run",
        f"learning-rl-{args.seed}",
        "--storage.root",
        str(root / "lake"),
        "--tasks.seed",
        str(args.seed),
        "--rl.seed",
        str(args.seed),
        *args.run_args,
    ]
    config = load_config(RunConfig, None, overrides)
    with prefect_api(root / "prefect"):
        asyncio.run(rl(config))
        store = open_store(config.storage)
        evals = {
            name: json.loads(store.fs.cat_file(store.path(f"{config.run}/evals/{name}.json")))
            for name in ("before", "after")
        }
        rl_seconds = rl_wall_seconds(store, config.run)
        v0 = checkpoints.get(store, config.run, 0).uri
        start = time.monotonic()
        sft_dir = continued_sft(config, v0, rl_seconds, root / "sft-continued")
        sft_seconds = time.monotonic() - start
        sft_run = config.model_copy(update={"run": f"learning-sft-{args.seed}"})
        checkpoints.publish(store, sft_run.run, 0, -1, str(sft_dir))
        sft_eval = asyncio.run(evaluate(sft_run, str(work_dir(config) / "corpus")))
    before, after = evals["before"], evals["after"]
    result = {
        "bench": "learning",
        "rl_gain_points": round(100 * (after["pass@1"] - before["pass@1"]), 1),
        "sft_gain_points": round(100 * (sft_eval["pass@1"] - before["pass@1"]), 1),
        "p_value": float(f"{paired_p(before, after):.3g}"),
        "p_value_sft": float(f"{paired_p(before, sft_eval):.3g}"),
        "heldout_tasks": after["tasks"],
        "pass_at_1_warm_start": before["pass@1"],
        "pass_at_1_rl": after["pass@1"],
        "pass_at_1_sft": sft_eval["pass@1"],
        "first_attempt_rl": after["first_attempt_pass@1"],
        "first_attempt_sft": sft_eval["first_attempt_pass@1"],
        "rl_train_s": round(rl_seconds, 1),
        "sft_train_s": round(sft_seconds, 1),
        "seed": args.seed,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
