"""`tandem run` as a user starts it, in a child process against the suite's Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]


def start_tandem(config: Path, out: IO[bytes], env: dict[str, str]) -> subprocess.Popen:
    """`tandem run --config CONFIG` started in its own process group, its output to `out`."""
    return subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "run", "--config", str(config)],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def run_tandem(config: Path, prefect_server: dict[str, str], timeout: int = 540, clean_env: bool = False) -> str:
    """`tandem run --config CONFIG` to its end; its whole output. Fails the test, with the
    output's tail, when the run fails or outlives `timeout` (then its whole process group,
    servers included, is killed, so the test ends inside pytest's own limit). `clean_env`:
    without the caller's PREFECT_, WANDB_ and MLFLOW_ variables (a tracker test's own)."""
    base = os.environ.items()
    env = {k: v for k, v in base if not (clean_env and k.startswith(("PREFECT_", "WANDB_", "MLFLOW_")))}
    env |= {**prefect_server, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile() as log:
        proc = start_tandem(config, log, env)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        log.seek(0)
        output = log.read().decode(errors="replace")
    assert code is not None, f"tandem run did not finish in {timeout} s:\n{output[-4000:]}"
    assert code == 0, output[-4000:]
    return output
