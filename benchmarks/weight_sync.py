"""From "the trainer published version v" to "the servers generate with v", by phase.

One local vLLM server (the CPU build) serves a Qwen3-MoE of 581 MB in fp32 (`--model
tiny`: the run's tiny one, whose digests take milliseconds); a request stream (one
short generation after another) runs all along, as a rollout lane's would. Each round:
`export` writes new weights as the trainer does (export_weights, with the tensor
digests), `transfer` copies them into a local lake folder, `load` is the pool's
weight update (engines/inference/weight_update.py: checks, pause, reload, version),
and `pause` is the longest stretch in which the request stream got no completion
during the load (the time generation stood still). `publish_to_serve_s` runs from
the start of the export to the first completion carrying the new version.

Two arms in one run, each in its own process: `ours` (this tree) and `baseline` (the
code at `--baseline` in a git worktree, default: before the digest check left the
pause). Medians over `--rounds`.

    TANDEM_VLLM_PYTHON=... python -m benchmarks.weight_sync [--rounds 5] [--baseline ed2ba90]

Last line: {"bench": "weight_sync", "publish_to_serve_s", "pause_s", "pause_share",
"baseline_publish_to_serve_s", "baseline_pause_s", "baseline_pause_share", ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "ed2ba90"  # main before the update's digest check moved out of the pause
PROMPT = [1, 40, 41, 42, 43, 4, 2]


async def _stream(pool, stop: asyncio.Event, done: list[tuple[float, int]]) -> None:
    """One short generation after another; each completion's time and weight version."""
    from engines.inference.types import SamplingParams

    while not stop.is_set():
        c = await pool.generate(PROMPT, SamplingParams(max_tokens=2, temperature=0.0))
        done.append((time.monotonic(), c.weight_version))


def mid_model(out: Path) -> Path:
    """A Qwen3-MoE of 152M parameters (581 MB in fp32), exported with its tokenizer
    (benchmarks/load_memory.py loads the same one)."""
    import torch
    from transformers import AutoModelForCausalLM

    from engines.model.families import tiny_config
    from engines.model.tokenizer import train_tokenizer
    from engines.trainer.export import export_weights

    tok = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 40, 300)
    config = tiny_config("qwen3_moe", vocab_size=len(tok))
    config.update(
        dict(hidden_size=512, num_hidden_layers=8, num_experts=32, moe_intermediate_size=384, intermediate_size=1024)
    )
    return Path(export_weights(AutoModelForCausalLM.from_config(config, dtype=torch.float32), tok, str(out), "fp32"))


async def _rounds(work: Path, rounds: int, size: str) -> list[dict[str, float]]:
    import torch

    from benchmarks.inference import make_tiny_model
    from engines.inference.config import EpisodeLimits, InferenceConfig
    from engines.inference.server_pool import ServerPool
    from engines.model.load import load_moe_causal_lm, load_tokenizer
    from engines.trainer.export import export_weights

    model_dir = make_tiny_model(work / "model", seed=0) if size == "tiny" else mid_model(work / "model")
    cfg = InferenceConfig(model_dir=str(model_dir), max_model_len=512, limits=EpisodeLimits(max_total_tokens=512))
    tok, model = load_tokenizer(model_dir), load_moe_causal_lm(model_dir)
    results = []
    async with ServerPool(cfg) as pool:
        stop, done = asyncio.Event(), []
        stream = asyncio.create_task(_stream(pool, stop, done))
        await asyncio.sleep(1.0)
        for version in range(1, rounds + 1):
            with torch.no_grad():
                next(model.parameters()).add_(1e-3)  # new weights each round
            t0 = time.monotonic()
            exported = await asyncio.to_thread(export_weights, model, tok, str(work / "export" / f"v{version}"))
            t1 = time.monotonic()
            lake = work / "lake" / f"v{version}"
            await asyncio.to_thread(shutil.copytree, exported, lake)
            t2 = time.monotonic()
            await pool.update_weights(str(lake), version)
            t3 = time.monotonic()
            while not any(v == version for _, v in done):
                await asyncio.sleep(0.01)
            served = next(t for t, v in done if v == version)
            during = [t for t, _ in done if t2 <= t <= served]
            gaps = [b - a for a, b in zip([t2, *during], [*during, served])]
            results.append(
                {
                    "export_s": t1 - t0,
                    "transfer_s": t2 - t1,
                    "load_s": t3 - t2,
                    "pause_s": max(gaps),
                    "publish_to_serve_s": served - t0,
                }
            )
            await asyncio.sleep(0.5)
        stop.set()
        await stream
    return results


def run_arm(work: Path, rounds: int, size: str, out: Path) -> None:
    results = asyncio.run(_rounds(work, rounds, size))
    out.write_text(json.dumps({k: statistics.median(r[k] for r in results) for k in results[0]}))


def arm(code_root: Path, work: Path, rounds: int, size: str, name: str) -> dict[str, float]:
    """One arm in its own process, with `code_root`'s modules."""
    out, folder = work / f"{name}.json", work / name
    folder.mkdir()
    # -P: the script's folder (benchmarks/, with its own storage.py) stays off the path.
    cmd = [sys.executable, "-P", str(REPO / "benchmarks" / "weight_sync.py"), "--arm", str(folder), str(out)]
    env = {**os.environ, "PYTHONPATH": str(code_root), "TOKENIZERS_PARALLELISM": "false"}
    cmd += ["--rounds", str(rounds), "--model", size]
    proc = subprocess.run(cmd, env=env, cwd=code_root, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"arm {name} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    print(f"{name}: " + json.dumps({k: round(v, 3) for k, v in result.items()}), file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="weight updates per arm")
    parser.add_argument("--baseline", default=BASELINE, help="commit whose weight update is the baseline arm")
    parser.add_argument("--model", choices=("mid", "tiny"), default="mid", help="581 MB Qwen3-MoE, or the tiny one")
    parser.add_argument("--arm", nargs=2, metavar=("WORK", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.arm:
        run_arm(Path(args.arm[0]), args.rounds, args.model, Path(args.arm[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tree = work / "baseline-tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), args.baseline], check=True)
        try:
            base = arm(tree, work, args.rounds, args.model, "baseline")
            ours = arm(REPO, work, args.rounds, args.model, "ours")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
    result = {"bench": "weight_sync", "model": args.model, "rounds": args.rounds}
    for prefix, r in (("", ours), ("baseline_", base)):
        result |= {f"{prefix}{k}": round(v, 3) for k, v in r.items()}
        result[f"{prefix}pause_share"] = round(r["pause_s"] / r["publish_to_serve_s"], 3)
    result["pause_speedup"] = round(base["pause_s"] / ours["pause_s"], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
