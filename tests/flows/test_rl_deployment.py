"""The `rl` deployment from prefect.yaml, run by a real process worker against a
real Prefect server, vLLM server and sandbox: it completes, shows its artifacts,
keeps the staleness bound, and survives its trainer lane being killed mid-run
with every step's shard present exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import checkpoints
from storage.fs import open_store
from storage.query import connect

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox]

STEPS = 3


def _config(root: Path, **rl) -> dict:
    return {
        "run": "deployed",
        "storage": {"root": str(root)},
        "tasks": {"train_tasks": 64, "heldout_tasks": 8},
        "eval": {"tasks": 4, "samples": 2},
        "rl": {"steps": STEPS, "batch_size": 8, "group_size": 4, "async_level": 1, **rl},
        "trainer": {"packing": False, "micro_batch_rows": 16, "seq_len": 512, "sft": {"max_steps": 5}},
    }


def _tandem(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=REPO, env={**os.environ, **env}, check=True)


def _trainer_lane_pids(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if "flows.trainer_lane" in cmd and marker in cmd:
            pids.append(int(proc.name))
    return pids


async def _run(env: dict, parameters: dict):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        flow_run = await run_deployment("rl/tiny-moe", parameters=parameters, timeout=0)
        return flow_run.id, get_client


@pytest.fixture(scope="module")
def worker(prefect_server: dict[str, str]):
    _tandem(prefect_server, "prefect-setup")
    subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=REPO,
        env={**os.environ, **prefect_server},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", "tandem-process"],
        cwd=REPO,
        env={**os.environ, **prefect_server},
        start_new_session=True,
    )
    yield prefect_server
    os.killpg(proc.pid, signal.SIGINT)  # the worker ignores SIGTERM for a while
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def test_invalid_parameters_are_rejected_when_the_run_is_created(worker, tmp_path):
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    bad = _config(tmp_path)
    bad["rl"]["batch_size"] = 6  # not a multiple of group_size 4
    with (
        temporary_settings(updates={PREFECT_API_URL: worker["PREFECT_API_URL"]}),
        pytest.raises(Exception, match="batch_size"),
    ):
        asyncio.run(run_deployment("rl/tiny-moe", parameters={"config": bad}, timeout=0))


def test_deployed_run_survives_a_killed_trainer_lane(worker, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    root = tmp_path / "lake"
    flow_run_id, _ = asyncio.run(_run(worker, {"config": _config(root)}))
    store = open_store(str(root))
    killed_at, killed, restarted = None, set(), False
    deadline = time.monotonic() + 600
    with (
        temporary_settings(updates={PREFECT_API_URL: worker["PREFECT_API_URL"]}),
        get_client(sync_client=True) as client,
    ):
        while True:
            state = client.read_flow_run(flow_run_id).state
            if state.is_final():
                break
            assert time.monotonic() < deadline, "the rl run did not finish in 10 minutes"
            if killed_at is None:
                latest = checkpoints.latest(store, "deployed") if (root / "deployed").exists() else None
                if latest is not None and latest.version >= 1:
                    killed = set(_trainer_lane_pids(str(root)))
                    for pid in killed:
                        os.kill(pid, signal.SIGKILL)
                    if killed:
                        # Read after the kill: a version the lane published meanwhile counts as before it.
                        killed_at = checkpoints.latest(store, "deployed").version
            elif not restarted:
                # A trainer lane other than the killed one: the run started it again. It has
                # versions left to publish (killed_at < STEPS), so it lives long enough to be seen.
                restarted = bool(set(_trainer_lane_pids(str(root))) - killed)
            time.sleep(0.2)
        assert state.is_completed(), f"rl run ended {state.type}: {state.message}"
        keys = ["deployed-steps", "deployed-curve", "deployed-summary"]
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))
    # Versions run 0 .. STEPS: killed before the last one was published, so a restarted
    # lane published the rest.
    assert killed_at is not None and killed_at < STEPS, f"the trainer lane was not killed mid-run ({killed_at=})"
    assert restarted, "no trainer lane was started again after the kill"
    assert {a.key for a in artifacts} == set(keys)

    lake = connect(store, "deployed")
    shards = lake.sql(
        "SELECT step, count(DISTINCT filename) AS files, count(*) AS episodes "
        "FROM read_parquet('" + str(root / "deployed/rollouts/*/*.parquet") + "', filename=true) "
        "GROUP BY step ORDER BY step"
    ).fetchall()
    assert shards == [(s, 1, 8) for s in range(STEPS)]
    assert lake.sql("SELECT step, count(*) FROM steps GROUP BY step ORDER BY step").fetchall() == [
        (s, 1) for s in range(STEPS)
    ]
    # The advantages each step trained on, one row per episode, recorded by the trainer.
    assert lake.sql("SELECT step, count(*) FROM advantages GROUP BY step ORDER BY step").fetchall() == [
        (s, 8) for s in range(STEPS)
    ]
    stale = lake.sql("SELECT max(step - min_policy_version) FROM rollouts").fetchall()[0][0]
    assert stale <= 1
    assert checkpoints.latest(store, "deployed").version == STEPS
    # Reproducible from the lake: the start's config, code version and corpus, and every episode's patch.
    ((kind, config, code, corpus),) = lake.sql("SELECT kind, config, code_version, corpus_id FROM runs").fetchall()
    assert kind == "rl" and json.loads(config)["rl"]["steps"] == STEPS and code.startswith(("git:", "tandem-rl "))
    assert corpus.startswith("sha256:")
    assert lake.sql("SELECT count(*) FROM rollouts WHERE patch IS NULL AND NOT infra_failure").fetchall() == [(0,)]
