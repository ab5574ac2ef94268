"""A whole `tandem run` (embedded Prefect server, real vLLM server, sandboxed
grading, trainer lane process) attacked while it works, each a SIGKILL of a real
process mid-step:

1. the vLLM server while it is paused for a weight update (before: the run failed
   at that update with WeightUpdateError ... ConnectError);
2. the embedded Prefect server (before: the lanes finished, then the run failed
   with ConnectError);
3. the rollout lane, mid-step: the run's own process, which takes its trainer lane
   and servers with it (the whole run); then the same command again, by name;
4. during that re-run, a component drawn at random (seeded) among those running, at a
   random moment, as `python -m benchmarks.chaos` does it (its shorter test).

After all of it: the run completes, every step's shard is there exactly once, no
episode is lost or duplicated, staleness never exceeds k, and the chaos benchmark's
own checks of the lake hold."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks import chaos
from storage import checkpoints, shards
from storage.fs import open_store
from storage.query import connect
from tests.flows.recipe_trial import merge, recipe, to_toml
from tests.flows.tandem_cli import start_tandem
from tests.processes import live

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.faults, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox]

RUN, STEPS, BATCH, K = "faulty", 6, 8, 1  # 6 steps: a quiet machine finished 4 before the third kill
SEED = 1  # the random fault's draw
PAUSE_STATE = re.compile(r"setting pause state to (\w+)")  # vLLM's scheduler, in the server log


def _config(root: Path) -> str:
    """configs/tiny.toml (the default run) at the scale of this test: the tiny recipe's run."""
    overlay = {
        "run": RUN,
        "storage": {"root": str(root)},
        "tasks": {"train_tasks": 64, "heldout_tasks": 4},
        "eval": {"tasks": 4, "samples": 1},
        "rl": {"steps": STEPS, "batch_size": BATCH, "group_size": 4, "async_level": K},
        "trainer": {"micro_batch_rows": 16, "sft": {"max_steps": 5}},
        "retention": {"milestone_every": 3},
    }
    return to_toml(merge(recipe("tiny"), overlay))


def _vllm_server(root: Path) -> tuple[int, int] | None:
    """(pid, port) of the run's vLLM API server (its --model lies under the run's root)."""
    found = live(lambda cmd, _: "vllm.entrypoints.openai.api_server" in cmd and str(root) in cmd)
    for pid, cmd in found:
        argv = cmd.split()
        return pid, int(argv[argv.index("--port") + 1])
    return None


def _until(what: str, check, timeout_s: float, proc: subprocess.Popen, poll_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert proc.poll() is None, f"the run exited with {proc.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"{what}: not seen in {timeout_s:.0f} s"
        time.sleep(poll_s)


def _pause_state(server_log: Path) -> str | None:
    """The engine's last pause-state line ("PAUSED_ALL" while a weight update has it paused)."""
    states = PAUSE_STATE.findall(server_log.read_text(errors="replace")) if server_log.exists() else []
    return states[-1] if states else None


def _stopped_mid_update(pid: int, server_log: Path) -> bool:
    """Freeze the server's process group (SIGSTOP) when its engine is paused for a weight
    update, and keep it frozen only if it still was when frozen (the engine writes its
    pause state as it changes, so a frozen engine's log cannot move on): the kill that
    follows lands inside the update, however short the update is."""
    if _pause_state(server_log) != "PAUSED_ALL":
        return False
    os.killpg(pid, signal.SIGSTOP)
    if _pause_state(server_log) == "PAUSED_ALL":
        return True
    os.killpg(pid, signal.SIGCONT)  # the update ended in between: wait for the next one
    return False


def _start(config: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "ab") as out:
        return start_tandem(config, out, env)


@pytest.fixture(scope="module")
def faulted_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("faults")
    root, log, config = tmp / "lake", tmp / "run.log", tmp / "run.toml"
    config.write_text(_config(root))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # the run starts its own server
    env |= {"TANDEM_PREFECT_HOME": str(tmp / "prefect-home"), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    store = open_store(str(root))
    seen: dict = {"log": log}
    proc = _start(config, log, env)
    try:
        # 1. The vLLM server while a weight update has it paused (the first update: v0 -> v1 or later).
        pid, _ = _until("the vLLM server", lambda: _vllm_server(root), 600, proc)
        server_log = root / RUN / "vllm-logs" / "server-0.log"
        _until("a server paused for a weight update", lambda: _stopped_mid_update(pid, server_log), 600, proc, 0.01)
        os.killpg(pid, signal.SIGKILL)
        seen["vllm_killed"] = pid
        seen["vllm_back"] = _until(
            "a new vLLM server", lambda: (s := _vllm_server(root)) and s[0] != pid and s, 300, proc
        )

        # 2. The embedded Prefect server, while a step is in progress.
        server = _until(
            "the Prefect server",
            lambda: live(lambda cmd, ppid: ppid == proc.pid and "prefect server start" in cmd),
            60,
            proc,
        )
        os.killpg(server[0][0], signal.SIGKILL)
        seen["prefect_killed"] = server[0][0]
        seen["prefect_back"] = _until(
            "a new Prefect server",
            lambda: [
                p
                for p in live(lambda cmd, ppid: ppid == proc.pid and "prefect server start" in cmd)
                if p[0] != server[0][0]
            ],
            120,
            proc,
        )
        # Healthy again before the next kill, or the run would be killed while still restarting it.
        _until(
            "the Prefect server back",
            lambda: "the Prefect server is back" in log.read_text(errors="replace"),
            180,
            proc,
        )

        # 3. The rollout lane (the run's process, and with it the whole run) in the middle of a step.
        def mid_step() -> int | None:
            done = [s for s in range(STEPS) if shards.shard_exists(store, RUN, s, "final")]
            return len(done) if 0 < len(done) < STEPS else None

        seen["killed_in_step"] = _until("a step in progress", mid_step, 600, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        seen["shards_before_rerun"] = [s for s in range(STEPS) if shards.shard_exists(store, RUN, s, "final")]
        gone = time.monotonic() + 60
        while _vllm_server(root) is not None:  # its server follows it (parent-death signal)
            assert time.monotonic() < gone, "the killed run's vLLM server outlived it"
            time.sleep(0.5)

        # The same command again: resumes by name.
        proc = _start(config, log, env)
        # 4. One random fault in the re-run, once its server is up (the whole run is not drawn: it was killed above).
        _until("the re-run's vLLM server", lambda: _vllm_server(root), 600, proc)
        rng = random.Random(SEED)
        time.sleep(rng.uniform(0, 3))
        running = {c: ps for c, ps in chaos.components(proc.pid).items() if ps and c != "rollout_lane"}
        component = rng.choice(sorted(running))
        chaos.kill(component, rng.choice(running[component]), run=None)
        seen["random_fault"] = component
        seen["rerun_code"] = proc.wait(900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    seen["store"], seen["root"] = store, root
    return seen


def _output(run: dict) -> str:
    return run["log"].read_text(errors="replace")


def test_the_run_completes_after_every_kill(faulted_run: dict) -> None:
    assert faulted_run["rerun_code"] == 0, _output(faulted_run)[-4000:]
    assert f"[tandem] run {RUN} finished" in _output(faulted_run)


def test_a_vllm_server_killed_during_a_weight_update_is_restarted_and_the_run_goes_on(faulted_run: dict) -> None:
    assert faulted_run["vllm_back"][0] != faulted_run["vllm_killed"]
    assert "WeightUpdateError" not in _output(faulted_run)


def test_a_killed_prefect_server_is_restarted_and_the_run_goes_on(faulted_run: dict) -> None:
    assert "the Prefect server exited" in _output(faulted_run)
    assert "the Prefect server is back" in _output(faulted_run)


def test_a_killed_run_resumes_by_name_with_every_shard_once_and_staleness_within_k(faulted_run: dict) -> None:
    store, root = faulted_run["store"], faulted_run["root"]
    assert faulted_run["shards_before_rerun"] != list(range(STEPS))  # it was killed mid-run
    lake = connect(store, RUN)
    files = lake.sql(
        "SELECT step, count(DISTINCT filename), count(*), count(DISTINCT group_id || '/' || sample_index) "
        f"FROM read_parquet('{root}/{RUN}/rollouts/*/*.parquet', filename=true) GROUP BY step ORDER BY step"
    ).fetchall()
    assert files == [(s, 1, BATCH, BATCH) for s in range(STEPS)]  # one shard per step; no episode lost or twice
    assert lake.sql("SELECT step, count(*) FROM steps GROUP BY step ORDER BY step").fetchall() == [
        (s, 1) for s in range(STEPS)
    ]
    assert lake.sql("SELECT max(step - min_policy_version) FROM rollouts").fetchall()[0][0] <= K
    assert checkpoints.latest(store, RUN).version == STEPS


def test_a_random_fault_in_the_rerun_leaves_the_chaos_benchmarks_checks_holding(faulted_run: dict) -> None:
    assert faulted_run["random_fault"] in chaos.COMPONENTS
    checks = chaos.check_lake(faulted_run["store"], RUN, STEPS, BATCH, K)
    assert checks == {
        "lost": 0,
        "duplicated": 0,
        "episodes_lost": 0,
        "episodes_duplicated": 0,
        "staleness_max": checks["staleness_max"],
        "staleness_within_bound": True,
        "versions_contiguous": True,
    }, checks


def test_retention_kept_the_newest_and_the_milestones(faulted_run: dict) -> None:
    versions = checkpoints.list_versions(faulted_run["store"], RUN)
    # Milestones (0, 3, 6), the newest two (5 and 6), and at most the one the re-run's server started from.
    kept = {0, 3, STEPS - 1, STEPS}
    assert kept <= set(versions) and len(set(versions) - kept) <= 1, versions
