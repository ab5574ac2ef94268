"""Grading throughput of our pool against a naive grader, and the sandbox's overhead.

Same tasks and patches for both (real-project tasks from a corpus; per task the
gold patch and the empty patch, so half the episodes resolve):

  naive   per episode, unsandboxed and one after another: a fresh copy of the
          repository, apply the bug and the patch, run the project's full test
          suite, parse the log and decide on the task's F2P/P2P tests;
  ours    engines.env.grader.GradingPool: workers bounded by cores and memory,
          reused repository copies, the patch filter, only the F2P and P2P tests,
          each run inside bubblewrap with cgroup and rlimit caps, in a warm sandbox
          per copy (pytest imported once, a fork per run). Measured in steady state,
          as in a run: after one warm-up pass over the same episodes.

Both should reach the same decisions (`decisions_agree`; `disagreements` lists the
episodes that differ: a test that depends on its environment, e.g. one expecting a
permission error that root on the host does not get, can pass only in the sandbox,
where the builder found it stable). `throughput_ratio` is our
episodes per second over the naive ones. `sandbox_overhead` compares the same
targeted test run with and without the sandbox (bubblewrap, cgroups, rlimits vs a
plain subprocess), interleaved on one prepared copy: (sandboxed - plain) / plain
over the summed wall times, with a fresh sandbox per run (the cost of sandboxing
itself); `warm_sandbox_run_s` is the same runs in a warm sandbox. `micro_grade_s`
is the median time to grade one micro task on one worker. `test_call_ms_pytest` and
`test_call_ms_fast` are the median milliseconds of one `test`-tool call on a micro
task through the pool (patch filtered and applied, tests run, tree reset), with
pytest and with the plain runner (plain_runner.py), alternating, on the buggy
module and on its fix. `monitor_ms_micro` and `monitor_ms_project` are the median
milliseconds the patch monitor (monitor.py) takes on one graded patch's changed files
(parsed afresh, base and patch: no cache), on micro tasks and on the corpus's tasks,
and `monitor_share_of_micro_grade` that cost over `micro_grade_s` (the cost of the
monitor as a share of grading). `judge_ms_micro` is what the strict judge (judge.py) adds
to the median grade of a resolved micro patch on one worker (the same gold patches graded
with `env.strict_judge` on and off, alternating, the fixed code's answers already cached
as after a group's first grade), `judge_first_ms_micro` the same for a task's first grade
(which also runs the judge on the fixed code), and `judge_share_of_micro_grade` the
steady cost over the grade without it. The last line printed is one JSON object.

    python -m benchmarks.grading [--corpus DIR] [--tasks 24] [--repeats 3] [--test-calls 200]
    python -m benchmarks.grading --test-calls-only   # only the test-call figures
Without --corpus, a small toolz corpus is built once and cached under
~/.cache/tandem-rl/bench-corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool, targeted_command
from engines.env.monitor import _facts, scan
from engines.env.report import frame_log, report_from_log
from engines.env.sandbox.runner import _sandbox_env, make_runner
from engines.env.sandbox.warm_pytest import WarmPytest, pytest_args
from engines.env.task_sources.builder import BuildConfig, build_corpus, discover
from engines.env.task_sources.corpus import load_corpus, save_corpus
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.types import Task
from engines.env.workspace import Workspace, apply_to_files, base_files, git_apply


def bench_corpus(path: str | None, n: int) -> list[Task]:
    if path:
        tasks = [t for t in load_corpus(path) if t.env_name == "swe"]
    else:
        cache = Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem-rl")) / "bench-corpus"
        if not (cache / "tasks.parquet").exists():
            tasks, _ = build_corpus(
                BuildConfig(projects=["toolz"], tasks_per_project=n, max_mutants_per_project=60), cache
            )
            save_corpus(tasks, cache)
        tasks = load_corpus(cache)
    by_repo: dict[str, list[Task]] = {}
    for t in tasks:
        by_repo.setdefault(t.repo, []).append(t)
    picked, i = [], 0
    while len(picked) < n and any(i < len(v) for v in by_repo.values()):  # spread over projects
        picked += [v[i] for v in by_repo.values() if i < len(v)]
        i += 1
    return picked[:n]


def naive_grade(task: Task, patch: str, scratch: Path) -> bool:
    """Fresh copy, full suite, unsandboxed: what a first grader usually does."""
    work = Path(tempfile.mkdtemp(dir=scratch))
    try:
        shutil.copytree(task.snapshot_uri, work / "repo")
        repo = work / "repo"
        assert git_apply(repo, task.meta()["bug_patch"]) == ""
        if git_apply(repo, patch):
            return False
        project = discover(repo)
        # the whole suite, as the builder runs it (a module with missing deps is skipped, not fatal)
        cmd = " ".join([task.test_cmd, "--continue-on-collection-errors", *map(shlex.quote, project.test_files)])
        env = _sandbox_env(sys.executable)
        proc = subprocess.run(["/bin/sh", "-c", cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        return report_from_log(
            frame_log(proc.stdout + proc.stderr, proc.returncode), task.log_parser, task.FAIL_TO_PASS, task.PASS_TO_PASS
        ).resolved
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sandbox_overhead(
    tasks: list[Task], config: EnvConfig, scratch: Path, repeats: int
) -> tuple[float, float, float, float]:
    """Seconds of the same targeted runs: sandboxed (a fresh sandbox per run), plain, and
    in a warm sandbox (pytest already imported)."""
    runner = make_runner(config)
    env = _sandbox_env(config.python)
    boxed = plain = warm_s = 0.0
    for task in tasks:
        ws = Workspace.for_task(task, scratch)
        cmd = targeted_command(task)
        with WarmPytest(config, runner, ws.root) as warm:
            runner.run(cmd, ws.root)  # warm file caches for all three
            warm.run(pytest_args(cmd))
            for _ in range(repeats):
                t = time.monotonic()
                subprocess.run(["/bin/sh", "-c", cmd], cwd=ws.root, env=env, capture_output=True, timeout=600)
                plain += time.monotonic() - t
                t = time.monotonic()
                runner.run(cmd, ws.root)
                boxed += time.monotonic() - t
                t = time.monotonic()
                warm.run(pytest_args(cmd))
                warm_s += time.monotonic() - t
        ws.destroy()
    return (boxed - plain) / plain, boxed, plain, warm_s


def test_call_ms(config: EnvConfig, calls: int) -> tuple[float, float]:
    """Median ms of a micro task's `test` call on one worker: by pytest, and fast."""
    tasks = generate_micro_tasks(max(1, calls // 2), seed=3)
    slow, fast = [], []
    with GradingPool(config, workers=1) as pool:
        pool.grade_one(tasks[0], "")  # the warm sandbox up, as in a run
        for task in tasks:
            for patch in (task.patch, ""):
                slow.append(pool.grade_one(task, patch).grading_s)
                result = pool.grade_one(task, patch, fast=True)
                assert result.runner == "plain", "a micro task's test call did not take the plain runner"
                fast.append(result.grading_s)
    return statistics.median(slow) * 1000, statistics.median(fast) * 1000


def monitor_ms(tasks: list[Task]) -> float:
    """Median ms of the patch monitor on each task's gold patch, as the grader calls it
    (the changed files and their base), with nothing cached."""
    times = []
    for task in tasks:
        base = base_files(task)
        fixed = apply_to_files(base, task.patch, "gold")
        changed = {p: data for p, data in fixed.items() if base.get(p) != data}
        for _ in range(5):
            _facts.cache_clear()
            start = time.perf_counter()
            scan({p: base[p] for p in changed if p in base}, changed, task.meta().get("test_files", []))
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def judge_ms(config: EnvConfig, tasks: list[Task]) -> tuple[float, float, float]:
    """(median ms the strict judge adds to a resolved micro grade once the fixed answers are
    cached, the same on a task's first grade, the median grade without it)."""
    on_pool = GradingPool(config.model_copy(update={"strict_judge": True}), workers=1)
    off_pool = GradingPool(config.model_copy(update={"strict_judge": False}), workers=1)
    first, on, off = [], [], []
    with on_pool, off_pool:
        on_pool.grade_one(tasks[0], tasks[0].patch)  # warm sandboxes up, as in a run
        off_pool.grade_one(tasks[0], tasks[0].patch)
        for task in tasks[1:]:
            first.append(on_pool.grade_one(task, task.patch).grading_s - off_pool.grade_one(task, task.patch).grading_s)
            for _ in range(3):
                off.append(off_pool.grade_one(task, task.patch).grading_s)
                result = on_pool.grade_one(task, task.patch)
                assert result.resolved, f"the gold patch of {task.instance_id} was not resolved: {result.notes}"
                on.append(result.grading_s)
    steady = (statistics.median(on) - statistics.median(off)) * 1000
    return steady, statistics.median(first) * 1000, statistics.median(off) * 1000


def _judge_figures(config: EnvConfig) -> dict:
    steady, first, grade = judge_ms(config, generate_micro_tasks(24, seed=5))
    return {
        "judge_ms_micro": round(steady, 1),
        "judge_first_ms_micro": round(first, 1),
        "resolved_micro_grade_ms": round(grade, 1),
        "judge_share_of_micro_grade": round(steady / grade, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="corpus directory (default: a cached toolz corpus)")
    parser.add_argument("--tasks", type=int, default=24, help="real-project tasks (2 episodes each)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each run for the overhead")
    parser.add_argument("--test-calls", type=int, default=200, help="micro `test` calls timed per path")
    parser.add_argument("--test-calls-only", action="store_true", help="time the test calls only (no corpus)")
    args = parser.parse_args()

    if args.test_calls_only:
        scratch = Path(tempfile.mkdtemp(prefix="bench-grading-"))
        try:
            slow_ms, fast_ms = test_call_ms(EnvConfig(scratch_dir=str(scratch)), args.test_calls)
            judge = _judge_figures(EnvConfig(scratch_dir=str(scratch)))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        micro_ms = monitor_ms(generate_micro_tasks(50, seed=1))
        calls = _test_calls(args.test_calls, slow_ms, fast_ms)
        print(json.dumps({**calls, "monitor_ms_micro": round(micro_ms, 3), **judge}))
        return

    tasks = bench_corpus(args.corpus, args.tasks)
    episodes = [(t, t.patch) for t in tasks] + [(t, "") for t in tasks]
    scratch = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    config = EnvConfig(scratch_dir=str(scratch))
    try:
        start = time.monotonic()
        naive = [naive_grade(t, p, scratch) for t, p in episodes]
        naive_s = time.monotonic() - start

        with GradingPool(config) as pool:
            # Warm up as a pool in a run is: parser imported, copies made, warm pytest sandboxes up.
            pool.grade_many(episodes)
            start = time.monotonic()
            ours = pool.grade_many(episodes)
            ours_s = time.monotonic() - start
            workers = pool.workers

        overhead, boxed, plain, warm_s = sandbox_overhead(tasks[:4], config, scratch, args.repeats)

        micro = generate_micro_tasks(12, seed=1)
        with GradingPool(config, workers=1) as pool:
            pool.grade_one(micro[0], micro[0].patch)
            micro_s = statistics.median(pool.grade_one(t, p).grading_s for t in micro for p in (t.patch, ""))
        slow_ms, fast_ms = test_call_ms(config, args.test_calls)
        judge = _judge_figures(config)
        micro_monitor_ms, project_monitor_ms = monitor_ms(micro), monitor_ms(tasks)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    result = {
        "episodes": len(episodes),
        "projects": sorted({t.repo for t in tasks}),
        "workers": workers,
        "naive_episodes_per_s": round(len(episodes) / naive_s, 3),
        "ours_episodes_per_s": round(len(episodes) / ours_s, 3),
        "throughput_ratio": round(naive_s / ours_s, 2),
        "decisions_agree": naive == [r.resolved for r in ours],
        "disagreements": [
            f"{t.instance_id}:{'gold' if p else 'empty'}"
            for (t, p), n, r in zip(episodes, naive, ours)
            if n != r.resolved
        ],
        "resolved": sum(r.resolved for r in ours),
        "infra_failures": sum(r.infra_failure for r in ours),
        "sandboxed_run_s": round(boxed, 3),
        "plain_run_s": round(plain, 3),
        "warm_sandbox_run_s": round(warm_s, 3),
        "sandbox_overhead": round(overhead, 4),
        "micro_grade_s": round(micro_s, 3),
        **_test_calls(args.test_calls, slow_ms, fast_ms),
        "monitor_ms_micro": round(micro_monitor_ms, 3),
        "monitor_ms_project": round(project_monitor_ms, 3),
        "monitor_share_of_micro_grade": round(micro_monitor_ms / 1000 / micro_s, 4),
        **judge,
    }
    print(json.dumps(result))


def _test_calls(calls: int, slow_ms: float, fast_ms: float) -> dict:
    return {
        "test_calls": calls,
        "test_call_ms_pytest": round(slow_ms, 1),
        "test_call_ms_fast": round(fast_ms, 1),
        "test_call_speedup": round(slow_ms / fast_ms, 2),
    }


if __name__ == "__main__":
    main()
