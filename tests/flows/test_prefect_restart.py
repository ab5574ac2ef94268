"""The embedded Prefect server killed (SIGKILL) while a flow is running: it is
started again on the same port and database, and the flow finishes with its
result. Before, the flow's tasks ran on, then the run failed with ConnectError.
The flow runs as the rollout lane does, confined off the trainer's core
(flows/cores_apart.py): the restarted server still gets every core."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import live

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.prefect]

SCRIPT = """
import os, sys, time
from prefect import flow, task
from flows.cores_apart import cores_apart
from flows.prefect_api import prefect_api

@task
def work(i):
    time.sleep(1.0)
    return i

@flow
def lane(n):
    return sum(work(i) for i in range(n))

with prefect_api(sys.argv[1], deadline_s=300), cores_apart([max(os.sched_getaffinity(0))]):
    print("[test] flow starting", flush=True)
    print(f"[test] result {lane(15)}", flush=True)
    while not os.path.exists(sys.argv[2]):  # the test has read the restarted server's cores
        time.sleep(0.1)
"""


def _children(pid: int, needle: str) -> list[int]:
    return [child for child, _ in live(lambda cmd, ppid: ppid == pid and needle in cmd)]


def test_a_killed_embedded_prefect_server_is_restarted_and_the_flow_finishes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"PYTHONPATH": str(REPO)}
    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "home"), str(tmp_path / "read")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 360
        while "[test] flow starting" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        time.sleep(4)  # a few of the flow's tasks have run
        servers = _children(proc.pid, "prefect server start")
        assert len(servers) == 1
        os.killpg(servers[0], signal.SIGKILL)
        while "[test] result" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline + 400, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        restarted = _children(proc.pid, "prefect server start")
        assert len(restarted) == 1 and restarted != servers
        cores = os.sched_getaffinity(restarted[0])
        (tmp_path / "read").touch()
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert code == 0, output[-4000:]
    assert "[test] result 105" in output
    assert cores == os.sched_getaffinity(0)  # not the confined flow's cores
    assert "the Prefect server exited" in output and "the Prefect server is back" in output
