"""Run a worker script of this folder as two torchrun ranks on CPU, from this checkout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from engines.trainer.torchrun import torchrun_command

REPO = Path(__file__).resolve().parents[3]


def run_two_ranks(worker: str, *args: str, timeout_s: float) -> None:
    """Run `worker` (a file beside this one) with `args` as 2 ranks; a failure fails
    the test with the ranks' output."""
    # The worker imports tests.* from the checkout; the two ranks share the cores.
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = torchrun_command(2, str(Path(__file__).with_name(worker)), *args)
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
