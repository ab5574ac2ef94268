"""Every deployment of prefect.yaml and each of its schedules, run once the way a user
runs them: `prefect deploy --all` against a real Prefect server, process workers on
the three pools, and flow runs created through the Prefect API with the parameters a
user would pass. Each must end Completed with its work in the lake or on disk. The
first rl run has its trainer lane SIGKILLed mid-run: it completes anyway, with every
step's shard once and the staleness bound kept. A run with invalid parameters ends
Failed before it starts anything.

One server, one set of workers and one lake serve the whole module (the tests build
on each other in file order: the rl run is the finished run that the evaluation,
re-grade and re-train deployments read)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from engines.env.task_sources.corpus import load_corpus
from flows.artifacts import curve_key, steps_key
from storage import checkpoints, runs
from storage.fs import open_store
from storage.query import connect
from tests.processes import live

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.deployments,
    pytest.mark.slow,
    pytest.mark.prefect,
    pytest.mark.vllm,
    pytest.mark.sandbox,
]
POOLS = ("tandem-process", "tandem-rollout", "tandem-trainer")
STEPS = 3


def _rl_config(root: Path, run: str, steps: int = STEPS, **extra: Any) -> dict:
    return {
        "run": run,
        "storage": {"root": str(root)},
        "tasks": {"train_tasks": 32, "heldout_tasks": 4},
        "eval": {"tasks": 4, "samples": 1},
        "rl": {"steps": steps, "batch_size": 8, "group_size": 4, "async_level": 1},
        "trainer": {"packing": False, "micro_batch_rows": 16, "seq_len": 512, "sft": {"max_steps": 5}},
        **extra,
    }


def _yaml_schedule(deployment: str) -> dict:
    """The parameters of `deployment`'s only schedule, as prefect.yaml writes them."""
    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    (entry,) = [d for d in doc["deployments"] if d["name"] == deployment]
    (schedule,) = entry["schedules"]
    assert schedule["active"] is False, f"{deployment}: schedules stay inactive until a user turns them on"
    return schedule["parameters"]


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture(scope="module")
def prefect(prefect_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """Deployments from prefect.yaml and a process worker per pool, all started from the checkout."""
    env = {**os.environ, **prefect_server}
    subprocess.run([sys.executable, "-m", "flows.cli", "prefect-setup"], cwd=REPO, env=env, check=True)
    subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
        cwd=REPO,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    logs = tmp_path_factory.mktemp("workers")
    workers = []
    for pool in POOLS:
        with open(logs / f"{pool}.log", "wb") as log:
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    yield prefect_server
    for proc in workers:
        os.killpg(proc.pid, signal.SIGINT)  # the worker ignores SIGTERM for a while
    for proc in workers:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's lake, holding from the start an rl run that started before any of
    the module's own (recorded, never trained): `newest` must pass it over."""
    from flows.config import RunConfig
    from flows.provenance import start_record

    root = tmp_path_factory.mktemp("lake")
    earlier = RunConfig(run="earlier", storage={"root": str(root)})
    runs.record_start(open_store(str(root)), "earlier", start_record(earlier, "rl", None))
    return root


def _api(env: dict[str, str]):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    return temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]})


def run_deployment(env: dict[str, str], name: str, parameters: dict, timeout_s: float = 540):
    """Create a flow run of `name` through the API, wait for a final state; the flow run."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment as create

    with _api(env):
        flow_run = create(name, parameters=parameters, timeout=0)  # sync here: returns at once
        deadline = time.monotonic() + timeout_s
        with get_client(sync_client=True) as client:
            while True:
                flow_run = client.read_flow_run(flow_run.id)
                if flow_run.state is not None and flow_run.state.is_final():
                    return flow_run
                assert time.monotonic() < deadline, f"{name} did not finish in {timeout_s:.0f} s"
                time.sleep(1)


def _completed(flow_run) -> None:
    assert flow_run.state.is_completed(), f"{flow_run.name} ended {flow_run.state.type}: {flow_run.state.message}"


def _children(env: dict[str, str], parent_id, flow_name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterParentFlowRunId

    with _api(env), get_client(sync_client=True) as client:
        return client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])),
        )


def _artifact_versions(env: dict[str, str], key: str) -> list:
    """Every version of the artifact `key`, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with _api(env), get_client(sync_client=True) as client:
        versions = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return sorted(versions, key=lambda a: a.created)


SMALL_PROJECT = {
    "shapes/__init__.py": """
        def area(w, h):
            return w * h


        def perimeter(w, h):
            return 2 * (w + h)


        def is_square(w, h):
            return w == h and w > 0


        def scale(w, h, k):
            return w * k, h * k
        """,
    "tests/test_shapes.py": """
        from shapes import area, is_square, perimeter, scale


        def test_area():
            assert area(2, 3) == 6


        def test_perimeter():
            assert perimeter(2, 3) == 10


        def test_square():
            assert is_square(2, 2) and not is_square(2, 3) and not is_square(0, 0)


        def test_scale():
            assert scale(1, 2, 3) == (3, 6)
        """,
}


def test_default_corpus_builds_tasks_from_a_local_project(prefect, tmp_path):
    project = tmp_path / "shapes-project"
    for rel, text in SMALL_PROJECT.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(textwrap.dedent(text).lstrip())
    out = tmp_path / "corpus"
    flow_run = run_deployment(
        prefect,
        "build-tasks/default-corpus",
        {
            "out_dir": str(out),
            "config": {
                "projects": [str(project)],
                "tasks_per_project": 2,
                "max_mutants_per_project": 20,
                "baseline_runs": 1,
                "env": {"workers": 2},
            },
        },
    )
    _completed(flow_run)
    tasks = load_corpus(out)
    assert tasks and {t.split for t in tasks} <= {"train", "heldout"}
    # Each task is a bug injected into the project's own source, which its tests catch.
    assert all(t.patch and "shapes/__init__.py" in t.patch and t.FAIL_TO_PASS for t in tasks)


def _trainer_lane_pids(marker: str) -> set[int]:
    """Live trainer lane processes whose command line holds `marker`."""
    return {pid for pid, _ in live(lambda cmd, _: "flows.trainer_lane" in cmd and marker in cmd)}


@pytest.fixture(scope="module")
def trained(prefect: dict[str, str], lake: Path) -> dict[str, Any]:
    """The rl deployment's run "trained", its trainer lane SIGKILLed once a version is
    published: the flow run, the version the lane was killed after and whether another
    lane was started. The later tests read this run."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment as create

    marker = str(lake / "trained")
    store = open_store(str(lake))
    killed_at, killed, restarted = None, set(), False
    deadline = time.monotonic() + 600
    with _api(prefect), get_client(sync_client=True) as client:
        flow_run = create("rl/tiny-moe", parameters={"config": _rl_config(lake, "trained")}, timeout=0)
        while not (flow_run := client.read_flow_run(flow_run.id)).state.is_final():
            assert time.monotonic() < deadline, "the rl run did not finish in 10 minutes"
            if killed_at is None:
                latest = checkpoints.latest(store, "trained") if (lake / "trained").exists() else None
                if latest is not None and latest.version >= 1 and (killed := _trainer_lane_pids(marker)):
                    for pid in killed:
                        os.kill(pid, signal.SIGKILL)
                    # Read after the kill: a version the lane published meanwhile counts as before it.
                    killed_at = checkpoints.latest(store, "trained").version
            elif not restarted:
                # A trainer lane other than the killed one: the run started it again. It has
                # versions left to publish (killed_at < STEPS), so it lives long enough to be seen.
                restarted = bool(_trainer_lane_pids(marker) - killed)
            time.sleep(0.2)
    return {"flow_run": flow_run, "killed_at": killed_at, "restarted": restarted}


def test_rl_deployment_completes_with_its_trainer_lane_under_it_and_a_watchable_curve(prefect, lake, trained):
    flow_run = trained["flow_run"]
    _completed(flow_run)
    lake_view = connect(open_store(str(lake)), "trained")
    assert lake_view.sql("SELECT step, count(*) FROM steps GROUP BY step ORDER BY step").fetchall() == [
        (s, 1) for s in range(STEPS)
    ]
    assert checkpoints.latest(open_store(str(lake)), "trained").version == STEPS
    # The trainer lane's flow runs are children of the rl run, and one of them finished the training.
    lanes = _children(prefect, flow_run.id, "trainer-lane")
    assert lanes and all(lane.parent_task_run_id is not None for lane in lanes)
    assert any(lane.state.is_completed() for lane in lanes), [lane.state for lane in lanes]
    # The curve and the table were updated as the run went, before its summary was written.
    (summary,) = _artifact_versions(prefect, "trained-summary")
    curves = [a for a in _artifact_versions(prefect, curve_key("trained")) if a.created < summary.created]
    assert len(curves) >= 3, f"{len(curves)} versions of the reward curve before the run ended"
    assert len(_artifact_versions(prefect, steps_key("trained"))) >= 3
    assert curve_key("trained") in summary.data and steps_key("trained") in summary.data


def test_deployed_run_survives_a_killed_trainer_lane(lake, trained):
    _completed(trained["flow_run"])
    # Versions run 0 .. STEPS: killed before the last one was published, so a restarted
    # lane published the rest.
    killed_at = trained["killed_at"]
    assert killed_at is not None and killed_at < STEPS, f"the trainer lane was not killed mid-run ({killed_at=})"
    assert trained["restarted"], "no trainer lane was started again after the kill"
    store = open_store(str(lake))
    lake_view = connect(store, "trained")
    shards = lake_view.sql(
        "SELECT step, count(DISTINCT filename) AS files, count(*) AS episodes "
        "FROM read_parquet('" + str(lake / "trained/rollouts/*/*.parquet") + "', filename=true) "
        "GROUP BY step ORDER BY step"
    ).fetchall()
    assert shards == [(s, 1, 8) for s in range(STEPS)]
    # The advantages each step trained on, one row per episode, recorded by the trainer.
    assert lake_view.sql("SELECT step, count(*) FROM advantages GROUP BY step ORDER BY step").fetchall() == [
        (s, 8) for s in range(STEPS)
    ]
    assert lake_view.sql("SELECT max(step - min_policy_version) FROM rollouts").fetchall()[0][0] <= 1
    # Reproducible from the lake: the start's config, code version and corpus, and every episode's patch.
    ((kind, config, code, corpus),) = lake_view.sql("SELECT kind, config, code_version, corpus_id FROM runs").fetchall()
    assert kind == "rl" and json.loads(config)["rl"]["steps"] == STEPS and code.startswith(("git:", "tandem-rl "))
    assert corpus.startswith("sha256:")
    assert lake_view.sql("SELECT count(*) FROM rollouts WHERE patch IS NULL AND NOT infra_failure").fetchall() == [(0,)]


def _schedule_on_server(env: dict[str, str], deployment: str) -> dict:
    from prefect.client.orchestration import get_client

    with _api(env), get_client(sync_client=True) as client:
        (schedule,) = client.read_deployment_schedules(client.read_deployment_by_name(deployment).id)
    assert schedule.active is False
    return schedule.parameters


def test_nightly_evaluation_evaluates_the_newest_runs_newest_weights(prefect, lake):
    params = _yaml_schedule("heldout")
    assert _schedule_on_server(prefect, "evaluate/heldout") == params
    # The schedule's parameters, with this test's lake and fewer tasks.
    flow_run = run_deployment(
        prefect, "evaluate/heldout", _merge(params, {"config": {"storage": {"root": str(lake)}, "eval": {"tasks": 4}}})
    )
    _completed(flow_run)
    store = open_store(str(lake))
    newest = checkpoints.latest(store, "trained").version  # "trained" started after "earlier"
    assert store.fs.exists(store.path(f"trained/evals/version={newest}.json"))
    rows = (
        connect(store, "trained")
        .sql("SELECT DISTINCT version FROM evaluations WHERE evaluation = 'evaluate'")
        .fetchall()
    )
    assert rows == [(newest,)]


def test_evaluation_refuses_a_run_without_weights(tmp_path):
    """Before any server starts: the flow's own body, in this process (a deployment's run
    of it is the nightly evaluation's above)."""
    import asyncio

    from flows.config import RunConfig
    from flows.evaluate import evaluate
    from flows.provenance import start_record

    root = tmp_path / "lake"
    config = RunConfig(run="unstarted", storage={"root": str(root)})
    runs.record_start(open_store(str(root)), "unstarted", start_record(config, "rl", None))
    with pytest.raises(Exception, match="'unstarted'.*no published weights"):
        asyncio.run(evaluate.fn(config=RunConfig(storage={"root": str(root)}), run="newest"))


def test_nightly_regrade_regrades_the_newest_run(prefect, lake):
    params = _yaml_schedule("regrade")
    assert _schedule_on_server(prefect, "replay-rescore/regrade") == params
    flow_run = run_deployment(
        prefect, "replay-rescore/regrade", _merge(params, {"config": {"storage": {"root": str(lake)}}})
    )
    _completed(flow_run)
    store = open_store(str(lake))
    (regrade,) = [r for r in os.listdir(lake) if r.startswith("trained-rescore-")]
    episodes = connect(store, "trained").sql("SELECT count(*) FROM rollouts").fetchall()[0][0]
    rescored = connect(store, regrade).sql("SELECT count(*) FROM rescores").fetchall()[0][0]
    assert episodes == 8 * STEPS and rescored == episodes
    assert runs.latest_start(store, regrade)["source_run"] == "trained"


def test_retrain_trains_a_new_run_on_a_finished_runs_episodes(prefect, lake):
    flow_run = run_deployment(
        prefect,
        "replay-train/retrain",
        {
            "config": {
                "source_run": "trained",
                "run": "retrained",
                "steps": 2,
                "storage": {"root": str(lake)},
                "trainer": {"lr": 1e-4},
            }
        },
    )
    _completed(flow_run)
    store = open_store(str(lake))
    assert checkpoints.latest(store, "retrained").version == 2
    assert json.loads(runs.latest_start(store, "retrained")["config"])["trainer"]["lr"] == 1e-4


def test_tandem_eval_evaluates_a_finished_run(prefect, lake):
    result = lake / "trained" / "evals" / f"version={STEPS}.json"  # the nightly evaluation wrote one too
    started = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "eval",
            "--run",
            "trained",
            "--storage.root",
            str(lake),
            "--eval.tasks",
            "4",
            "--eval.samples",
            "2",
        ],
        cwd=REPO,
        env={**os.environ, **prefect},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[eval]" in done.stdout
    assert result.stat().st_mtime >= started, "tandem eval did not write the run's evaluation"
    rows = (
        connect(open_store(str(lake)), "trained")
        .sql("SELECT version, pass, count(*) FROM evaluations WHERE evaluation = 'evaluate' GROUP BY ALL ORDER BY pass")
        .fetchall()
    )
    # Greedy: one episode per held-out task, then the sampled passes; all of the newest weights.
    assert {(v, p) for v, p, _ in rows} == {(STEPS, "greedy"), (STEPS, "sampled")}
    assert dict((p, n) for _, p, n in rows)["greedy"] == 4


def test_invalid_parameters_fail_the_run_before_it_starts_anything(prefect, tmp_path):
    """The server takes any parameters its schema allows (a cross-field rule is not in it);
    the flow validates them before its first task: the run ends Failed, saying which key
    and what to do, with nothing written. Last in the module: the run holds the rl
    deployment's one slot while it starts, which the runs above would wait for."""
    bad = _rl_config(tmp_path / "lake", "rejected")
    bad["rl"]["batch_size"] = 6  # not a multiple of group_size 4
    flow_run = run_deployment(prefect, "rl/tiny-moe", {"config": bad})
    assert flow_run.state.is_failed(), flow_run.state
    assert "rl.batch_size (6) is not divisible by rl.group_size (4)" in flow_run.state.message
    assert not (tmp_path / "lake").exists()
