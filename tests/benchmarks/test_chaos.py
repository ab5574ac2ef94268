"""`python -m benchmarks.chaos` at its smallest: the default loop for 3 steps while 3
components, drawn at random (seeded) among those running, are killed at random
moments; the benchmark's own lake checks must all hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox]


def test_a_short_chaos_run_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "chaos"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.chaos", "--steps", "3", "--faults", "3", "--max-delay-s", "3"]
        + ["--seed", "1", "--no-baseline", "--workdir", str(workdir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = (workdir / "faulted" / "run.log").read_text(errors="replace") if workdir.exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + log[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bench"] == "chaos" and result["steps"] == 3
    assert result["faults"] >= 1, result  # the run may end before the last fault is due
    assert result["lost"] == result["duplicated"] == 0, result
    assert result["episodes_lost"] == result["episodes_duplicated"] == 0, result
    assert result["staleness_within_bound"] and result["versions_contiguous"], result
    assert result["leftover_processes"] == 0, result
