"""A run killed with SIGKILL takes its trainer lane with it: the lane process (a
Prefect flow run whose SIGTERM handler starts a teardown that talks to the run's
Prefect server, which died too), torchrun under it and torchrun's ranks (each in
its own session) are all gone within seconds, and so is the run's Prefect server.

The owner below is `tandem run` reduced to what starts those processes: an embedded
Prefect server and a supervised trainer lane with trainer.processes 2."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.prefect]

OWNER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from engines.trainer.config import TrainerConfig
    from engines.trainer.lane import LaneConfig
    from flows.trainer_lane import TrainerProcess
    from flows.prefect_api import prefect_api
    from flows.prefect_setup import ensure_limits

    work, model = Path(sys.argv[1]), sys.argv[2]
    cfg = LaneConfig(
        model_dir=model, storage={"root": str(work / "lake")}, run="owned", num_steps=2,
        state_dir=str(work / "state"), trainer=TrainerConfig(processes=2),
    )
    with prefect_api(work / "prefect-home", deadline_s=300):
        ensure_limits(cfg.run)
        # No rollouts ever come: the lane and its ranks wait for step 0 until killed.
        asyncio.run(TrainerProcess(cfg, work / "trainer_lane.json", max_restarts=3).run())
""")


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live descendant of `root` (zombies left out)."""
    found = {}
    for proc in psutil.Process(root).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found[proc.pid] = " ".join(proc.cmdline())
    return found


def _alive(pids: set[int]) -> dict[int, str]:
    """The processes of `pids` still running (zombies left out): pid -> command line."""
    alive = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive[pid] = " ".join(proc.cmdline())
    return alive


def test_a_sigkilled_owner_takes_its_trainer_lane_torchrun_and_ranks_along(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # the owner starts its own server
    env |= {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    log = open(tmp_path / "owner.log", "wb")  # noqa: SIM115 - closed below
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path), str(tiny_model_dir)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 420
        while True:
            tree = _descendants(owner.pid)
            ranks = [c for c in tree.values() if "-m engines.trainer.lane" in c and "torch.distributed.run" not in c]
            if len(ranks) == 2:
                break
            assert owner.poll() is None, (tmp_path / "owner.log").read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, f"no two trainer ranks after 420 s: {tree}"
            time.sleep(1)
        assert any("flows.trainer_lane" in cmd for cmd in tree.values()), tree
        assert any("prefect server start" in cmd for cmd in tree.values()), tree
        time.sleep(3)  # the ranks past their start, waiting for rollouts
        tree = _descendants(owner.pid)
        os.kill(owner.pid, signal.SIGKILL)  # no handler, no finally, no atexit in the owner
        owner.wait()
        gone = time.monotonic() + 10
        while (left := _alive(set(tree))) and time.monotonic() < gone:
            time.sleep(0.2)
        assert not left, f"outlived their killed owner by 10 s: {left}"
    finally:
        log.close()
        for pid in _alive(set(tree)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if owner.poll() is None:
            owner.kill()
