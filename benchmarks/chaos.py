"""The default loop (`tandem run`, configs/tiny.toml at a small batch) while a random
component is killed (SIGKILL) at random moments, then the lake checked.

Components: the vLLM server, the trainer lane (with `trainer.processes` 1 it is the
trainer's only rank; with more, `trainer_rank` kills one torchrun rank), the rollout
lane (the run's own process: the whole run goes, and the same command is run again, as
a user would), the embedded Prefect server, and a grading sandbox (a bubblewrap
process of an episode being graded). Fault i waits until i * steps / faults steps are
in the lake, then a random 0-`--max-delay-s` seconds, and kills one live process of a
component drawn among those running then. A run that exits with an error on its own
(a restart budget spent) is run again too, and counted.

Checked at the end, against the lake: every step's shard once (`lost`: steps without
one, `duplicated`: extra shards), every episode once (batch distinct episodes per
step), staleness within `rl.async_level`, the versions published after each step
contiguous (1..steps), no process of the run left. The baseline is the same run
without faults, in the same invocation: `slowdown` is the faulted run's wall time
over it.

    python -m benchmarks.chaos [--steps 40] [--faults 20] [--seed 0] [--no-baseline]

The last line printed is one JSON object:
{"bench": "chaos", "faults": N, "steps": M, "lost": 0, "duplicated": 0, ...}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from storage import layout, shards
from storage.fs import Store, open_store
from storage.query import connect

REPO = Path(__file__).resolve().parents[1]
COMPONENTS = ("vllm_server", "trainer_lane", "trainer_rank", "rollout_lane", "prefect_server", "grading_sandbox")


def run_command(root: Path, run: str, args: argparse.Namespace) -> list[str]:
    """`tandem run` on configs/tiny.toml at the benchmark's scale (the same command resumes it)."""
    scale = {
        "run": run,
        "storage.root": str(root),
        "rl.steps": args.steps,
        "rl.batch_size": args.batch_size,
        "rl.group_size": 4,
        "rl.async_level": args.async_level,
        "tasks.train_tasks": 256,
        "tasks.heldout_tasks": 4,
        "eval.tasks": 4,
        "trainer.micro_batch_rows": 16,
        "trainer.sft.max_steps": args.sft_steps,
        "retention.milestone_every": 10,
    }
    flags = [part for key, value in scale.items() for part in (f"--{key}", str(value))]
    return [sys.executable, "-m", "flows.cli", "run", "--config", str(REPO / "configs/tiny.toml"), *flags]


class ChaosRun:
    """One run by name, started again whenever it is gone before it finished."""

    def __init__(self, command: list[str], workdir: Path) -> None:
        self.command, self.log = command, workdir / "run.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # its own Prefect server
        self.env = env | {"TANDEM_PREFECT_HOME": str(workdir / "prefect-home"), "PYTHONPATH": str(REPO)}
        self.starts, self.failures = 0, 0
        self.proc: subprocess.Popen | None = None
        self.family: list[psutil.Process] = []  # the processes the current start has started
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1

    def finished(self) -> bool:
        """True once a start exited 0; a start that failed on its own is started again."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            with contextlib.suppress(psutil.Error):
                self.family = psutil.Process(self.proc.pid).children(recursive=True)
            return False
        if code == 0:
            return True
        self.failures += 1
        self._restart()
        return False

    def kill(self) -> None:
        """The whole run, as a killed terminal would (its servers and lanes follow it), then the same command again."""
        assert self.proc is not None
        with contextlib.suppress(psutil.Error):
            self.family = psutil.Process(self.proc.pid).children(recursive=True)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._restart()

    def _restart(self) -> None:
        """Once what the last start started is gone (it ends with it), start again."""
        psutil.wait_procs(self.family, timeout=90)
        self.start()


def components(run_pid: int) -> dict[str, list[psutil.Process]]:
    """The live processes of each component of the run started as `run_pid`."""
    found: dict[str, list[psutil.Process]] = {name: [] for name in COMPONENTS}
    try:
        root = psutil.Process(run_pid)
        found["rollout_lane"].append(root)
        descendants = root.children(recursive=True)
    except psutil.Error:
        return found
    for proc in descendants:
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "vllm.entrypoints.openai.api_server" in cmd:
            found["vllm_server"].append(proc)
        elif "prefect server start" in cmd:
            found["prefect_server"].append(proc)
        elif "flows.trainer_lane" in cmd:
            found["trainer_lane"].append(proc)
        elif "torch.distributed.run" in cmd or "flows.trainer_ranks" in cmd:
            found["trainer_rank"].append(proc)
        elif proc.name() == "bwrap":
            found["grading_sandbox"].append(proc)
    return found


def kill(component: str, proc: psutil.Process, run: ChaosRun | None) -> None:
    """SIGKILL `proc`, and with it its process group where it leads one (a server's workers);
    the rollout lane is the whole `run`, started again."""
    if component == "rollout_lane":
        assert run is not None, "killing the rollout lane needs the run to start again"
        run.kill()
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, psutil.Error):
        pass


def leftovers(marker: str) -> list[str]:
    """Command lines of live processes that name `marker` (the run's folder or pid)."""
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}  # this benchmark and what started it name the folder too
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if marker in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE and proc.pid not in mine:
            out.append(cmd)
    return out


def published_steps(store: Store, run: str, steps: int) -> int:
    return sum(shards.shard_exists(store, run, s, "final") for s in range(steps))


def inject(run: ChaosRun, store: Store, name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The faults, each at a random moment once its share of the steps is in the lake."""
    rng, faults, start = random.Random(args.seed), [], time.monotonic()
    for i in range(args.faults):
        due = i * args.steps // args.faults
        while published_steps(store, name, args.steps) < due:
            if run.finished():
                return faults
            time.sleep(0.5)
        time.sleep(rng.uniform(0, args.max_delay_s))
        if run.finished():
            return faults
        assert run.proc is not None
        live = {c: procs for c, procs in components(run.proc.pid).items() if procs}
        component = rng.choice(sorted(live))
        victim = rng.choice(live[component])
        step = published_steps(store, name, args.steps)
        kill(component, victim, run)
        faults.append({"component": component, "steps_done": step, "at_s": round(time.monotonic() - start, 1)})
        print(f"[chaos] fault {i + 1}/{args.faults}: {component} (pid {victim.pid}) with {step} steps done", flush=True)
    return faults


def check_lake(store: Store, run: str, steps: int, batch: int, async_level: int) -> dict[str, Any]:
    """Every step's shard and episodes once, staleness within the bound, versions contiguous."""
    pattern = store.path(layout.GLOBS["rollouts"].format(run=run))
    files = Counter(int(m.group(1)) for f in store.fs.glob(pattern) if (m := layout.STEP_RE.search(f)))
    lake = connect(store, run)
    episodes = dict(
        lake.sql("SELECT step, count(DISTINCT group_id || '/' || sample_index) FROM rollouts GROUP BY step").fetchall()
    )
    rows = dict(lake.sql("SELECT step, count(*) FROM rollouts GROUP BY step").fetchall())
    versions = [v for (v,) in lake.sql("SELECT policy_version FROM steps ORDER BY step").fetchall()]
    staleness = lake.sql("SELECT max(step - min_policy_version) FROM rollouts").fetchall()[0][0]
    return {
        "lost": sum(1 for s in range(steps) if files[s] == 0),
        "duplicated": sum(max(0, n - 1) for n in files.values()),
        "episodes_lost": sum(max(0, batch - episodes.get(s, 0)) for s in range(steps)),
        "episodes_duplicated": sum(rows.get(s, 0) - episodes.get(s, 0) for s in range(steps)),
        "staleness_max": staleness,
        "staleness_within_bound": staleness is not None and staleness <= async_level,
        "versions_contiguous": versions == list(range(1, steps + 1)),
    }


def one_run(workdir: Path, name: str, args: argparse.Namespace, faulted: bool) -> dict[str, Any]:
    root = workdir / "lake"
    store = open_store(str(root))
    start = time.monotonic()
    run = ChaosRun(run_command(root, name, args), workdir)
    faults = inject(run, store, name, args) if faulted else []
    while not run.finished():
        assert time.monotonic() - start < args.timeout_s, f"the run did not finish in {args.timeout_s} s; {run.log}"
        time.sleep(1)
    wall = time.monotonic() - start
    psutil.wait_procs(run.family, timeout=60)  # its servers and lanes end with it
    result = check_lake(store, name, args.steps, args.batch_size, args.async_level)
    return result | {"wall_s": round(wall, 1), "faults": faults, "starts": run.starts, "run_failures": run.failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--async-level", type=int, default=1)
    parser.add_argument(
        "--sft-steps", type=int, default=5, help="warm-start steps (the loop, not learning, is measured)"
    )
    parser.add_argument("--max-delay-s", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--no-baseline", action="store_true", help="skip the same run without faults")
    parser.add_argument("--workdir", default=None, help="a new folder for the runs, kept (default: a temporary one)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.workdir:
            tmp = Path(args.workdir)
            tmp.mkdir(parents=True, exist_ok=False)
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-")))
        base = None
        if not args.no_baseline:
            (tmp / "baseline").mkdir()
            base = one_run(tmp / "baseline", f"chaos-base-{args.seed}", args, faulted=False)
            print(f"[chaos] baseline: {base['wall_s']} s without faults", flush=True)
        (tmp / "faulted").mkdir()
        result = one_run(tmp / "faulted", f"chaos-{args.seed}", args, faulted=True)
        left = leftovers(str(tmp))
    by_component = Counter(f["component"] for f in result.pop("faults"))
    summary = {
        "bench": "chaos",
        "faults": sum(by_component.values()),
        "steps": args.steps,
        **{k: result[k] for k in ("lost", "duplicated", "episodes_lost", "episodes_duplicated")},
        "staleness_max": result["staleness_max"],
        "staleness_within_bound": result["staleness_within_bound"],
        "versions_contiguous": result["versions_contiguous"],
        "leftover_processes": len(left),
        "starts": result["starts"],
        "run_failures": result["run_failures"],
        "faults_by_component": dict(sorted(by_component.items())),
        "wall_s": result["wall_s"],
        "baseline_wall_s": None if base is None else base["wall_s"],
        "slowdown": None if base is None else round(result["wall_s"] / base["wall_s"], 2),
        "seed": args.seed,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
