"""A lane ends with its run (flows/parent_watch.py): on the suite's Prefect server, the
watch reads a parent flow run that lives, one that is Crashed, and one whose lease on
the run's liveness limit is gone; and a trainer lane started as a worker starts a
deployed lane (its own session, no owner link) ends by itself once the process of its
rl flow run is SIGKILLed, within the lease and a poll."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.processes import alive

pytestmark = [pytest.mark.prefect, pytest.mark.faults, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_watch_reads_the_parents_state_and_its_lease(prefect_server: dict[str, str]) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Crashed, Running

    from flows.parent_watch import ParentWatch
    from flows.prefect_setup import ensure_limits
    from tasks.limits import run_limit

    @flow(name="rl-stand-in")
    def stand_in() -> None:
        pass

    with temporary_settings(updates={PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        ensure_limits("watched")
        with get_client(sync_client=True) as client:
            parent = client.create_flow_run(stand_in, state=Running())
            watch = ParentWatch(parent.id, "watched")
            assert watch.gone(client) is None  # running, the lease never taken: only its state counts
            lease = client.increment_concurrency_slots_with_lease(
                names=[run_limit("watched")], slots=1, mode="concurrency", lease_duration=60
            ).json()["lease_id"]
            assert watch.gone(client) is None and watch.lease_seen
            client.release_concurrency_slots_with_lease(lease)  # as a lapsed lease leaves it
            assert "lease on tandem-run:watched ran out" in watch.gone(client)
            crashed = client.create_flow_run(stand_in, state=Running())
            client.set_flow_run_state(crashed.id, Crashed(message="killed"), force=True)
            assert ParentWatch(crashed.id, "watched").gone(client) == "its rl flow run is CRASHED"


# The rl flow's part in lanes-apart mode: the run's limits, its lease held, the lane's
# flow run created as its child, and the lane started as a worker would (its own
# session, no owner link); then it waits to be killed.
_PARENT = textwrap.dedent("""
    import asyncio, os, subprocess, sys
    from pathlib import Path
    from prefect import flow
    from prefect.concurrency.asyncio import concurrency
    from engines.trainer.lane import LaneConfig
    from flows.prefect_setup import ensure_limits
    from flows.trainer_lane import create_child_run, trainer_lane
    from tasks.limits import SLOT_LEASE_S, run_limit

    work, model = Path(sys.argv[1]), sys.argv[2]
    cfg = LaneConfig(model_dir=model, storage={"root": str(work / "lake")}, run="orphan", num_steps=2,
                     state_dir=str(work / "state"))

    @flow(name="rl-stand-in")
    async def parent() -> None:
        async with concurrency(run_limit(cfg.run), occupy=1, lease_duration=SLOT_LEASE_S):
            child = await create_child_run(trainer_lane, {"config": cfg.model_dump(mode="json")})
            (work / "lane.json").write_text(cfg.model_dump_json())
            cmd = [sys.executable, "-m", "flows.trainer_lane", "--config", str(work / "lane.json"),
                   "--flow-run-id", str(child.flow_run.id)]
            with open(work / "lane.log", "wb") as log:
                lane = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            (work / "lane.id").write_text(str(child.flow_run.id))
            (work / "lane.pid").write_text(str(lane.pid))
            await asyncio.sleep(3600)  # no rollouts ever come: the lane waits for step 0

    ensure_limits(cfg.run)
    asyncio.run(parent())
""")


def test_a_deployed_lane_ends_once_its_rl_flows_process_is_sigkilled(
    prefect_server: dict[str, str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    from flows.parent_watch import POLL_S
    from tasks.limits import SLOT_LEASE_S

    env = {**os.environ, **prefect_server, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path), str(tiny_model_dir)], cwd=REPO, env=env, start_new_session=True
    )
    lane_pid, log = tmp_path / "lane.pid", tmp_path / "lane.log"
    try:
        deadline = time.monotonic() + 180
        while not (lane_pid.exists() and _running(tmp_path / "lane.id", prefect_server)):
            assert parent.poll() is None and time.monotonic() < deadline, _tail(log)
            time.sleep(1)
        os.killpg(parent.pid, signal.SIGKILL)  # no worker, nothing reports it: only its lease stops
        parent.wait()
        killed, lane = time.monotonic(), int(lane_pid.read_text())
        bound = SLOT_LEASE_S + 2 * POLL_S + 30  # the lease, a poll, the repossessor's sweep, the lane's cleanup
        while _alive(lane):
            assert time.monotonic() - killed < bound, f"the lane outlived its run by {bound:.0f} s"
            time.sleep(1)
        ended_after = time.monotonic() - killed
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        if lane_pid.exists() and _alive(int(lane_pid.read_text())):
            os.killpg(int(lane_pid.read_text()), signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert "ending this lane: its rl flow's lease on tandem-run:orphan ran out" in text, text[-3000:]
    # Not before the lease could lapse: the rl flow renews it every 3/4 of SLOT_LEASE_S, so
    # at the kill between a quarter and all of it is left (a lane once ended 45 s after it).
    assert ended_after >= SLOT_LEASE_S / 4


def _running(flow_run_id: Path, prefect_server: dict[str, str]) -> bool:
    """Whether the lane's flow run has begun (its watch starts with it)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    api = {PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}
    with temporary_settings(updates=api), get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(flow_run_id.read_text())).state
    return state is not None and state.is_running()


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no lane log yet)"


def _alive(pid: int) -> bool:
    return alive(pid)
