"""`tandem run` as a user starts it, in a child process against the suite's Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
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
    return run_tandems([config], prefect_server, timeout, clean_env)[0]


def run_tandems(
    configs: list[Path], prefect_server: dict[str, str], timeout: int = 540, clean_env: bool = False
) -> list[str]:
    """As run_tandem, for several runs started at once against the same Prefect server;
    their outputs in order. Every run has `timeout` seconds from the common start."""
    base = os.environ.items()
    env = {k: v for k, v in base if not (clean_env and k.startswith(("PREFECT_", "WANDB_", "MLFLOW_")))}
    env |= {**prefect_server, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    deadline = time.monotonic() + timeout
    with ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in configs]
        procs = [start_tandem(config, log, env) for config, log in zip(configs, logs)]
        codes = [_wait(proc, deadline) for proc in procs]
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read().decode(errors="replace"))
    for config, code, output in zip(configs, codes, outputs):
        assert code is not None, f"tandem run --config {config.name} did not finish in {timeout} s:\n{output[-4000:]}"
        assert code == 0, f"tandem run --config {config.name}:\n{output[-4000:]}"
    return outputs


def _wait(proc: subprocess.Popen, deadline: float) -> int | None:
    """The run's exit code, or None when it outlived `deadline` (its process group killed)."""
    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
