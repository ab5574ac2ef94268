"""Lanes on different machines: the rl deployment with `lanes` set submits its rollout
lane and its trainer lane to two work pools, each served by a process worker with its
own working directory, HOME and temporary folder; they share only the moto S3 server,
the Prefect API and HTTP. Both lanes' machines die at once mid-run (workers and lanes
killed, the rollout host's vLLM server with them), their runs are marked Crashed (what
an operator or a heartbeat automation does), and two new machines' workers take the
resubmitted lanes: the trainer resumes at its last step from the state in the lake,
the rollout lane at the first step not in the lake. Every step's shard is present exactly once, and the lanes'
flow runs are children of the rl run (the deployment tests' lanes case). A third machine
serves half the servers (`inference.hosts = 2`, a server-host deployment): it outlives the
crash and the new rollout lane attaches its server again. The model is a
`model.path` folder on the control host: its v0 reaches the other machines through the
lake, as every later version does."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from engines.handoff import lake_folder
from engines.trainer import lake_state
from flows.lanes_config import LanesConfig
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect

REPO = Path(__file__).resolve().parents[2]
RUN = "apart"
STEPS = 3
LANES = {"rollout_deployment": "rollout-host/remote", "trainer_deployment": "trainer-lane/remote"}
LANE_FLOWS = ("rollout-host", "rollout-lane", "trainer-lane")  # rollout-lane: the rollout host's subflow
# vLLM's cache as an installed machine keeps it, outside the host's HOME: with none, each
# server start inspects the model class in a subprocess first (about 8 s alone, 25-30 s
# beside the rest of the suite), which is set-up of the machine, not of the run.
VLLM_CACHE = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")


def test_lanes_config_needs_both_deployments_or_none() -> None:
    assert not LanesConfig().deployed and LanesConfig(**LANES).deployed
    with pytest.raises(ValueError, match="set both"):
        LanesConfig(rollout_deployment="rollout-host/remote")


def test_a_trainer_over_several_nodes_runs_one_deployed_lane_per_node(tmp_path: Path) -> None:
    from flows.config import RunConfig
    from flows.lanes_apart import node_lanes
    from flows.runtime import trainer_lane_config

    nodes = {"processes": 4, "parallelism": "fsdp2", "nodes": 2, "rendezvous": "trainer-0:29500"}
    with pytest.raises(ValueError, match="trainer.nodes = 2: .* one trainer lane per node"):
        RunConfig(trainer=nodes)
    with pytest.raises(ValueError, match="trainer.nodes = 2: SFT starts .* or set model.path"):
        RunConfig(trainer=nodes, lanes=LANES)  # the tiny model's warm start trains on one machine
    weights = {"path": "s3://lake/base-model"}
    run = RunConfig(
        trainer=nodes, lanes=LANES, model=weights, inference={"tool_format": "text"}, storage={"root": str(tmp_path)}
    )
    per_node = node_lanes(trainer_lane_config(run, "m"))
    assert [lane.trainer.node_rank for lane in per_node] == [0, 1]
    assert {lane.trainer.rendezvous for lane in per_node} == {"trainer-0:29500"}


def test_servers_on_other_hosts_run_as_one_deployed_lane_each(tmp_path: Path) -> None:
    from flows.config import RunConfig
    from flows.lanes_apart import server_lanes

    hosts = {"hosts": 3, "num_servers": 3, "host": "0.0.0.0"}
    with pytest.raises(ValueError, match="inference.hosts = 3: .* set lanes.server_deployment"):
        RunConfig(inference=hosts, lanes=LANES)
    with pytest.raises(ValueError, match="lanes.server_deployment = 'server-host/remote' .* inference.hosts = 1"):
        RunConfig(lanes={**LANES, "server_deployment": "server-host/remote"})
    run = RunConfig(inference=hosts, lanes={**LANES, "server_deployment": "server-host/remote"})
    lanes = server_lanes(run)
    assert [lane["host"] for lane in lanes] == [1, 2]
    assert RunConfig(**lanes[0]["config"]).inference.local_servers == 1


class Host:
    """A process worker standing for one machine: its own cwd, HOME, TMPDIR and PREFECT_HOME
    (vLLM's cache is the installed machine's: VLLM_CACHE)."""

    def __init__(self, base: Path, pool: str, env: dict[str, str]) -> None:
        self.base = base
        for sub in ("home", "prefect"):
            (base / sub).mkdir(parents=True)
        # A short TMPDIR outside the test's folder: vLLM binds ZeroMQ IPC sockets there,
        # and a Unix socket path holds at most 107 bytes.
        self.tmp = Path(tempfile.mkdtemp(prefix="host-"))
        self.log_path = base / "worker.log"
        self.home = base / "home"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool],
                cwd=base,
                env={
                    **os.environ,
                    **env,
                    "HOME": str(base / "home"),
                    "TMPDIR": str(self.tmp),
                    "PREFECT_HOME": str(base / "prefect"),
                    "VLLM_CACHE_ROOT": VLLM_CACHE,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def crash(self) -> None:
        """The machine dies: the worker and everything it started, at once."""
        worker = psutil.Process(self.proc.pid)
        for proc in [worker, *worker.children(recursive=True)]:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait()

    def interrupt(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # the worker ignores SIGTERM for a while

    def stop(self) -> None:
        """After `interrupt` (of every host first, so they wind down side by side)."""
        if self.proc.poll() is None:
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _config(root: str, model: Path) -> dict:
    return {
        "run": RUN,
        "storage": {"root": root},
        "model": {"path": str(model)},  # a folder on the control host: v0 reaches the others through the lake
        "tasks": {"train_tasks": 32, "heldout_tasks": 4},
        "eval": {"tasks": 4, "samples": 1},
        "rl": {"steps": STEPS, "batch_size": 8, "group_size": 4, "async_level": 1},
        "trainer": {"packing": False, "micro_batch_rows": 16, "seq_len": 512},
        # Two vLLM hosts: the rollout lane's machine and a server host (one server each).
        "inference": {"hosts": 2, "num_servers": 2, "host": "0.0.0.0"},
        "lanes": {**LANES, "server_deployment": "server-host/remote", "poll_interval_s": 1.0},
    }


def _deploy(env: dict[str, str]) -> None:
    full = {**os.environ, **env}
    subprocess.run([sys.executable, "-m", "flows.cli", "prefect-setup"], cwd=REPO, env=full, check=True)
    subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=REPO,
        env=full,
        check=True,
        stdout=subprocess.DEVNULL,
    )


async def _submit(config: dict):
    from prefect.deployments import run_deployment

    return (await run_deployment("rl/tiny-moe", parameters={"config": config}, timeout=0)).id


def _mark_running_lanes_crashed(client) -> list[str]:
    """The flows of the dead machines' runs, marked Crashed (sorted names)."""
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    marked = []
    for flow_name in LANE_FLOWS:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING]))
            ),
        )
        for run in runs:
            client.set_flow_run_state(run.id, Crashed(message="its machine stopped answering"), force=True)
            marked.append(flow_name)
    return sorted(marked)


@pytest.fixture(scope="module")
def apart_run(
    prefect_server: dict[str, str],
    s3_server: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    tiny_model_dir: Path,
) -> dict[str, Any]:
    """The run, both lanes' machines crashed once a version is out: its flow run's final
    state and id, the version they were killed after, each host's worker log and HOME."""
    import boto3
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    env = {**prefect_server, **s3_server}
    _deploy(env)
    bucket = "t-lanes-apart"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/lake"
    store = open_store(root)
    tmp_path = tmp_path_factory.mktemp("hosts")
    hosts = {
        "control": Host(tmp_path / "control", "tandem-process", env),
        "rollout": Host(tmp_path / "rollout", "tandem-rollout", env),
        "trainer-a": Host(tmp_path / "trainer-a", "tandem-trainer", env),
        # Its server on the other core than the rollout host's (each binds its first local core).
        "servers": Host(tmp_path / "servers", "tandem-servers", {**env, "VLLM_CPU_OMP_THREADS_BIND": "1"}),
    }
    killed_at = None
    try:
        with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
            flow_run_id = asyncio.run(_submit(_config(root, tiny_model_dir)))
            deadline = time.monotonic() + 840
            with get_client(sync_client=True) as client:
                while True:
                    state = client.read_flow_run(flow_run_id).state
                    if state.is_final():
                        break
                    assert time.monotonic() < deadline, "the rl run did not finish in 14 minutes"
                    latest = checkpoints.latest(store, RUN) if killed_at is None else None
                    # Killed once a version is out and a state is in the lake: killed earlier,
                    # the next machine rightly starts at step 0 (nothing to resume from).
                    if latest is not None and latest.version >= 1 and lake_state.lake_steps(store, RUN):
                        hosts["trainer-a"].crash()
                        hosts["rollout"].crash()
                        killed_at = latest.version
                        assert _mark_running_lanes_crashed(client) == sorted(LANE_FLOWS)
                        hosts["trainer-c"] = Host(tmp_path / "trainer-c", "tandem-trainer", env)
                        hosts["rollout-b"] = Host(tmp_path / "rollout-b", "tandem-rollout", env)
                    time.sleep(0.5)
        logs = {name: host.log_path.read_text(errors="replace") for name, host in hosts.items()}
    finally:
        for host in hosts.values():
            host.interrupt()
        for host in hosts.values():
            host.stop()
    return {
        "state": state,
        "flow_run_id": flow_run_id,
        "killed_at": killed_at,
        "logs": logs,
        "homes": {name: host.home for name, host in hosts.items()},
        "store": store,
        "env": env,
    }


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.timeout(900)  # the run's: the first test that asks for it sets it up
def test_lanes_on_different_machines_share_only_s3_and_resume_elsewhere(apart_run: dict[str, Any]) -> None:
    state, logs, killed_at, store = apart_run["state"], apart_run["logs"], apart_run["killed_at"], apart_run["store"]
    assert state.is_completed(), f"rl run ended {state.type}: {state.message}\n" + logs["control"][-4000:]
    assert killed_at is not None and killed_at < STEPS, "the lanes' machines were not killed mid-run"

    # The third machine's trainer resumed from the lake's state, not from step 0.
    resumed = re.findall(rf"resuming run {RUN} at step (\d+)", logs["trainer-c"])
    assert resumed and killed_at - 1 <= int(resumed[0]) <= killed_at, logs["trainer-c"][-4000:]
    assert "trainer-lane" not in logs["rollout"] and "rollout-host" not in logs["trainer-c"]
    # The new rollout host went on from the lake: the steps published before the crash were not rolled out again.
    assert re.search(rf"\[rollout\] resuming run {RUN}: [1-{STEPS}] of {STEPS} steps", logs["rollout-b"]), logs[
        "rollout-b"
    ][-4000:]

    lake = connect(store, RUN)
    shards = sorted(f.rsplit("/", 2)[-2:] for f in store.fs.glob(store.path(RUN, "rollouts", "step=*", "*.parquet")))
    assert shards == [[f"step={s}", "final.parquet"] for s in range(STEPS)]
    assert lake.sql("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step").fetchall() == [
        (s, 8) for s in range(STEPS)
    ]
    assert lake.sql("SELECT step, count(*) FROM steps GROUP BY step ORDER BY step").fetchall() == [
        (s, 1) for s in range(STEPS)
    ]
    assert checkpoints.latest(store, RUN).version == STEPS
    # model.path's v0 was published through the lake, like every later version.
    assert checkpoints.get(store, RUN, 0).uri == checkpoints.weights_uri(store, RUN, 0)
    assert checkpoints.weights_uri(store, RUN, 0).startswith("s3://")
    # Each machine kept its files in its own folders: weights pulled by the rollout host
    # into its bounded cache, trainer state on the trainer hosts (and in the lake).
    assert 1 <= _cached_versions(apart_run, "rollout-b", "weights") <= 3
    work = Path(".cache/tandem-rl/work") / lake_folder(store.url())
    assert (apart_run["homes"]["trainer-c"] / work / RUN / "trainer_state").is_dir()
    assert store.fs.glob(store.path(RUN, "trainer_state", "step-*", "progress.json"))


def _cached_versions(apart_run: dict[str, Any], host: str, cache: str) -> int:
    """Weight versions in a host's bounded cache (`cache`, under the run's work folder in its HOME)."""
    work = Path(".cache/tandem-rl/work") / lake_folder(apart_run["store"].url())
    folder = apart_run["homes"][host] / work / RUN / cache
    return len([p for p in folder.iterdir() if p.name.startswith("v")])


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_a_server_host_serves_both_rollout_lanes_from_its_own_copies(apart_run: dict[str, Any]) -> None:
    """inference.hosts = 2: the server host outlived the rollout host's crash, the new
    rollout lane attached its server again, and every version reached it through its own
    checked copy, the last one loaded by the new lane."""
    assert apart_run["state"].is_completed()
    log = apart_run["logs"]["servers"]
    done = re.search(r"host 1: (\d+) requests served, versions staged \[([\d, ]+)\], serving \[(\d+)\]", log)
    assert done, log[-4000:]
    requests, staged, serving = int(done[1]), [int(v) for v in done[2].split(",")], int(done[3])
    assert requests > 0
    assert staged == list(range(staged[0], STEPS + 1)), staged  # every version from its start on, in order
    assert serving == STEPS  # only a pool reloads it: the lane that outlived the crash
    # Its copies are in its own HOME's cache, not the rollout host's.
    assert 1 <= _cached_versions(apart_run, "servers", "host-1/weights") <= 3
    record = json.loads(apart_run["store"].fs.cat_file(apart_run["store"].path(RUN, "servers", "host-1.json")))
    assert len(record["urls"]) == 1 and str(STEPS) in record["staged"]


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
@pytest.mark.deployments
@pytest.mark.timeout(900)
def test_lanes_as_deployments_run_under_the_rl_run(apart_run: dict[str, Any]) -> None:
    """The lanes' flow runs are children of the rl run, each twice: the crashed machine's
    and the one that finished."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    assert apart_run["state"].is_completed()
    children = {}
    with (
        temporary_settings(updates={PREFECT_API_URL: apart_run["env"]["PREFECT_API_URL"]}),
        get_client(sync_client=True) as client,
    ):
        for flow_name in ("rollout-host", "trainer-lane", "server-host"):
            children[flow_name] = client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[apart_run["flow_run_id"]])
                ),
            )
    assert sorted(c.state.type.value for c in children["rollout-host"]) == ["COMPLETED", "CRASHED"]
    assert sorted(c.state.type.value for c in children["trainer-lane"]) == ["COMPLETED", "CRASHED"]
    assert [c.state.type.value for c in children["server-host"]] == ["COMPLETED"]  # its machine never died
