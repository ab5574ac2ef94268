"""`scripts/gpu_check.py --all` on this CPU, as a real process with no GPU visible: the
device plan (one GPU simulated) and the 2-rank sharded load of every family (gloo) pass,
and the results file says so, with the date, the device "cpu" and the commit; the parts
that need a GPU (the bf16 load onto GPU 0, two RL steps with vLLM, weight_sync) are
skipped with the reason, never reported as run. About 15 s."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CPU_CHECKS = ("device_plan", "sharded_load")
GPU_CHECKS = ("gpu_load", "rl_steps", "weight_sync")
FAMILIES = {"qwen3_moe", "mixtral", "deepseek_v3", "glm4_moe", "gpt_oss", "tiny"}


@pytest.mark.slow
def test_all_on_cpu_runs_the_cpu_parts_and_skips_the_gpu_parts(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    days = {datetime.date.today().isoformat()}
    cmd = [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--all", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    days.add(datetime.date.today().isoformat())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads(out.read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert results["date"] in days and results["device"] == "cpu" and results["gpus"] == 0
    assert results["commit"].removesuffix("+dirty") == head
    assert results["torch"] == torch.__version__
    checks = results["checks"]
    assert list(checks) == [*CPU_CHECKS, *GPU_CHECKS]
    assert {name: checks[name]["status"] for name in CPU_CHECKS} == dict.fromkeys(CPU_CHECKS, "ok"), checks
    for name in GPU_CHECKS:
        assert checks[name]["status"] == "skipped" and checks[name]["reason"].startswith("needs a GPU: "), checks[name]
        assert "figures" not in checks[name]

    plan = checks["device_plan"]["figures"]
    assert plan["simulated"] and plan["gpus"] == 1
    assert "trainer.share_devices = true" in plan["refused_without_sharing"]
    assert (plan["server_visible"], plan["trainer_visible"]) == ("0", "0")
    load = checks["sharded_load"]["figures"]
    assert load["ranks"] == "2 gloo ranks on the CPU"
    for precision in ("fp32", "bf16"):
        assert set(load["logit_error"][precision]) == FAMILIES
    assert set(load["largest_rank_share"]) == FAMILIES and max(load["largest_rank_share"].values()) <= 0.6
    # bf16 is compared at its own precision; its distance from fp32 is real, and reported.
    assert all(e["fp32_max"] > 0 for e in load["logit_error"]["bf16"].values())
    assert f"results: {out}" in proc.stdout
