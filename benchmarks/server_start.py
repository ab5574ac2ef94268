"""Time to a ready vLLM server: the engine core forked (ours) vs spawned (vLLM's CPU default).

Starts the same local server (the tiny Qwen3-MoE unless --model-dir is given, one rank,
the environment `launch.server_environment` gives it) --rounds times each way,
alternating: `forked` with that environment (the platform plugin of
engines/inference/vllm_extension forks the engine core), `spawned` with the plugin's
switch removed (vLLM's CPU platform spawns it: a fresh interpreter imports vLLM again).
Each start is timed until /health answers, and the CPU seconds of the server's
processes are read at that moment. Every server restart of a run (a crash, a
weight update by restart) and every test that starts a server pays this.

    TANDEM_VLLM_PYTHON=... python -m benchmarks.server_start [--rounds 3]

The last line printed is one JSON object; `speedup` is spawned over forked ready time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.inference import make_tiny_model
from engines.inference import launch
from engines.inference.config import InferenceConfig
from engines.inference.server_process import LocalServer, free_port


def _tree_cpu_s(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def start_once(cfg: InferenceConfig, python: str, forked: bool, log: Path) -> tuple[float, float]:
    """(seconds to healthy, CPU seconds of the server's processes then) of one start."""
    port = free_port()
    env = launch.server_environment(cfg, cpu_build=True)
    if not forked:
        env.pop(launch.FORK_ENGINE_ENV, None)
    server = LocalServer(launch.server_command(cfg, python, port, True), env, f"http://127.0.0.1:{port}", log)
    server.start()
    try:
        ready_s = asyncio.run(server.wait_healthy(300.0))
        assert server.process is not None
        return ready_s, _tree_cpu_s(server.process.pid)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", help="HF causal LM to serve (default: a fresh tiny MoE)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    python = launch.vllm_python()
    if not launch.is_cpu_build(python):
        sys.exit("server_start compares the CPU build's two start methods; this vLLM environment is the GPU build")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model_dir or str(make_tiny_model(Path(tmp) / "model", seed=0))
        cfg = InferenceConfig(model_dir=model)
        times: dict[str, list[tuple[float, float]]] = {"forked": [], "spawned": []}
        for r in range(args.rounds):
            for way in ("forked", "spawned") if r % 2 == 0 else ("spawned", "forked"):
                ready_s, cpu_s = start_once(cfg, python, way == "forked", Path(tmp) / f"{way}-{r}.log")
                times[way].append((ready_s, cpu_s))
                print(f"[server_start] round {r + 1}/{args.rounds} {way}: ready in {ready_s:.1f} s, {cpu_s:.1f} CPU-s")
    ready = {way: statistics.median(t for t, _ in runs) for way, runs in times.items()}
    cpu = {way: statistics.median(c for _, c in runs) for way, runs in times.items()}
    print(
        json.dumps(
            {
                "bench": "server_start",
                "forked_ready_s": round(ready["forked"], 2),
                "spawned_ready_s": round(ready["spawned"], 2),
                "forked_cpu_s": round(cpu["forked"], 2),
                "spawned_cpu_s": round(cpu["spawned"], 2),
                "speedup": round(ready["spawned"] / ready["forked"], 2),
                "rounds": args.rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
