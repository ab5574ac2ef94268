"""`tandem run` as a user starts it, in a child process against the suite's Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_tandem(config: Path, prefect_server: dict[str, str], timeout: int = 900, clean_env: bool = False) -> str:
    """`tandem run --config CONFIG` to its end; its whole output. Fails the test, with the
    output's tail, when the run fails. `clean_env`: without the caller's PREFECT_, WANDB_
    and MLFLOW_ variables (a tracker test's own)."""
    base = os.environ.items()
    env = {k: v for k, v in base if not (clean_env and k.startswith(("PREFECT_", "WANDB_", "MLFLOW_")))}
    env |= {**prefect_server, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output
