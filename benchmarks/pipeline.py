"""Asynchronous RL (k = 1) against synchronous RL (k = 0) on the same short run.

Both runs start from the same warm-start weights (the first run's version 0), use
the same tasks, batch and seeds, and give generation and training disjoint cores
(vLLM binds the lowest core, the trainer lane the highest). Reported:

  steps_per_hour_k1 / _k0 : optimizer steps per hour of the RL loop (from the first
                            rollout step to the trainer's last publication)
  async_speedup           : k1 over k0 (2x is the limit for balanced stages)
  prefect_overhead        : share of the rollout lane's step wall time spent in
                            Prefect itself (outside the bodies of its tasks)
  overlap_limit           : the best k = 1 can do given the synchronous run's stages,
                            (R + T) / max(R, T) with R its rollout work per step and T
                            its wait for the trainer; 2 for balanced stages
  overlap_efficiency      : async_speedup / overlap_limit (1: the trainer is hidden
                            entirely behind generation, or the reverse)
  cpu_busy_k1 / _k0       : share of the machine's CPU time (all cores, all processes)
                            that was busy during each run's RL loop
  cpu_limit               : 1 / cpu_busy_k0, the speedup k = 1 would reach by filling
                            every idle cycle the synchronous run left with the same work;
                            overlap cannot beat it however the stages are balanced
  stage seconds           : mean generation, grading, weight update and training
                            time per step, to see which stage bounds the loop
  trained_steps_k1 / _k0  : optimizer steps that updated weights (a step whose groups
                            all share one reward has nothing to learn and is skipped)

    python -m benchmarks.pipeline [--steps 8] [--batch-size 32] [--group-size 8] [--sft-steps 400 | --model-path DIR]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from flows.config import RunConfig
from flows.prefect_api import prefect_api
from flows.rl import rl
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect


def run_once(root: Path, name: str, k: int, args: argparse.Namespace, model_path: str | None) -> dict:
    trainer: dict = {"packing": False, "micro_batch_rows": 64, "seq_len": 512}
    if model_path is None:  # the tiny model's warm start; a given model is version 0 as it is
        trainer["sft"] = {"max_steps": args.sft_steps}
    cfg = RunConfig.model_validate(
        {
            "run": name,
            "storage": {"root": str(root)},
            "model": {"path": model_path},
            "tasks": {"train_tasks": 1000, "heldout_tasks": args.eval_tasks},
            "eval": {"tasks": args.eval_tasks, "samples": 1},
            "rl": {"steps": args.steps, "async_level": k, "batch_size": args.batch_size, "group_size": args.group_size},
            "trainer": trainer,
        }
    )
    summary = asyncio.run(rl(cfg))
    lake = connect(open_store(str(root)), name)
    stages = lake.sql("SELECT avg(generation_s), avg(training_s), count(loss) FROM steps").fetchall()[0]
    return {**summary, "generation_s": stages[0], "training_s": stages[1], "trained_steps": stages[2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--eval-tasks", type=int, default=20)
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=400,
        help="warm-start steps when no --model-path is given (400: about 5%% reward, so steps train)",
    )
    parser.add_argument(
        "--model-path",
        help="warm-start weights for both runs (default: a short SFT in the k = 1 run); "
        "a warm start that earns no reward skips every optimizer step, so training is not measured",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    with prefect_api(root / "prefect"):
        k1 = run_once(root / "lake", "async-k1", 1, args, args.model_path)
        v0 = checkpoints.get(open_store(str(root / "lake")), "async-k1", 0).uri
        k0 = run_once(root / "lake", "sync-k0", 0, args, v0)
    speedup = k1["steps per hour"] / k0["steps per hour"]
    rollout_s, trainer_s = k0["rollout s per step"], k0["wait for trainer s per step"]
    limit = (rollout_s + trainer_s) / max(rollout_s, trainer_s)
    result = {
        "bench": "pipeline",
        "async_speedup": round(speedup, 3),
        "prefect_overhead": round(max(k1["prefect overhead"], k0["prefect overhead"]), 4),
        "steps_per_hour_k1": k1["steps per hour"],
        "steps_per_hour_k0": k0["steps per hour"],
        "prefect_overhead_k1": k1["prefect overhead"],
        "prefect_overhead_k0": k0["prefect overhead"],
        "overlap_limit": round(limit, 3),
        "overlap_efficiency": round(speedup / limit, 3),
        "cpu_busy_k1": k1["cpu busy share"],
        "cpu_busy_k0": k0["cpu busy share"],
        "cpu_limit": round(1 / k0["cpu busy share"], 3) if k0["cpu busy share"] else None,
        "rollout_s_per_step_k0": rollout_s,
        "trainer_wait_s_per_step_k0": trainer_s,
        "staleness_max_k1": k1["staleness_max"],
        "staleness_max_k0": k0["staleness_max"],
        "training_s_per_step": round(k1["training_s"], 2),
        "trained_steps_k1": k1["trained_steps"],
        "trained_steps_k0": k0["trained_steps"],
        "steps": args.steps,
        "batch_size": args.batch_size,
    }
    if not (k1["trained_steps"] and k0["trained_steps"]):
        print(
            "warning: a run trained no step (its warm start earned no reward): the speedup does not include "
            "training; give a warm start with --model-path or more --sft-steps",
            file=sys.stderr,
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
