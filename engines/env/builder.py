"""Real-repository tasks, SWE-smith style: sdist -> stable tests -> AST mutants -> validated tasks.

For each project (a pinned sdist or a local folder, sources.py):
  1. download (pinned, cached) and unpack it, or copy the folder, as the corpus's
     snapshot of the project;
  2. find its pytest test files and source files (generic: any pure-Python project),
     and install its declared dependencies into a folder of their own (deps.py);
  3. run the suite `baseline_runs` times in the sandbox; tests PASSED every time are stable;
  4. for mutants of source files (mutations.py), run the suite on the mutant and keep
     it when every stable test was still collected (imports work) and 1 to `max_f2p`
     stable tests went from passing to failing;
  5. write the task: bug_patch (clean -> mutant) defines its base, the gold patch
     reverts it, FAIL_TO_PASS are the broken tests, PASS_TO_PASS the other stable tests
     of the same test files; the problem statement gives failing test names and their
     assertion output, not the answer;
  6. validate with the real grader: the gold patch resolves the task.
A project that cannot be built (no tests, no stable test, dependencies that do not
install, a download that fails) is reported with its reason and skipped; the other
projects' tasks are kept, and the corpus is saved after each project, so a build
stopped midway keeps what it validated.
"""

from __future__ import annotations

import hashlib
import json
import queue
import random
import shlex
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from engines.env.config import EnvConfig
from engines.env.corpus import save_corpus
from engines.env.deps import declared_requirements, ensure_deps, pythonpath_entry
from engines.env.errors import BuildError, TaskError
from engines.env.grader import GradingPool
from engines.env.mutations import Mutation, mutations
from engines.env.report import frame_log, parse_statuses
from engines.env.sandbox import make_runner
from engines.env.sdists import DEFAULT_PINS
from engines.env.sources import ProjectSource, project_source
from engines.env.types import Task
from engines.env.workspace import Workspace, read_tree, unified_diff

LOG_PARSER = "parse_log_pytest"
_SKIP_DIRS = {
    "docs",
    "doc",
    "examples",
    "example",
    "benchmarks",
    "bench",
    "build",
    "dist",
    "scripts",
    ".git",
    ".github",
}


class BuildConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    projects: list[str] = Field(
        default_factory=lambda: [p.name for p in DEFAULT_PINS],
        description="Default pin names, 'name==version:sha256' specs or project folders.",
    )
    tasks_per_project: int = Field(
        45, ge=1, description="Validated tasks wanted per project; mutants are tried until reached."
    )
    max_mutants_per_project: int = Field(
        400, ge=1, description="Upper bound on mutants tried per project (each costs one suite run)."
    )
    baseline_runs: int = Field(
        3, ge=1, description="Suite runs on the clean project; tests PASSED in all of them are 'stable'."
    )
    max_f2p: int = Field(20, ge=1, description="Most tests a kept mutant may break (SWE-smith keeps 1 to 20).")
    heldout_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Share of tasks put in the held-out split (by a hash of the id: stable across rebuilds).",
    )
    seed: int = Field(0, description="Seed of the mutant order.")
    env: EnvConfig = Field(default_factory=EnvConfig, description="Sandbox and grading settings used for every run.")


@dataclass
class ProjectReport:
    name: str
    version: str
    tests_total: int = 0
    tests_stable: int = 0
    mutants_tried: int = 0
    kept: int = 0
    heldout: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    dependencies: int = 0  # declared requirements installed for its tests
    skipped: str = ""  # why the project gave no tasks, when it could not be built


@dataclass(frozen=True)
class Project:
    root: Path
    test_files: tuple[str, ...]
    source_files: tuple[str, ...]
    test_cmd: str
    requirements: tuple[str, ...] = ()  # installed beside it (deps.py); kept in each task's metadata


def discover(root: Path, deps_key: str | None = None) -> Project:
    """Test files (test_*.py, *_test.py, tests.py) and mutable source files of a project tree."""
    tests, sources = [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(p in _SKIP_DIRS or p.startswith(".") for p in rel.parts[:-1]):
            continue
        name = rel.name
        in_test_dir = any(p in ("tests", "test", "testing") for p in rel.parts[:-1])
        if name.startswith("test_") or name.endswith("_test.py") or (name == "tests.py" and in_test_dir):
            tests.append(str(rel))
        elif (
            not in_test_dir
            and name not in ("setup.py", "conftest.py", "noxfile.py")
            and not name.startswith("_version")
        ):
            sources.append(str(rel))
    if not tests:
        raise BuildError(
            f"{root.name}: no pytest test files (test_*.py, *_test.py) in the sdist; pick a project that ships its tests"
        )
    return Project(root, tuple(tests), tuple(sources), test_command(root, deps_key))


def test_command(root: Path, deps_key: str | None = None) -> str:
    """pytest over the project at `root`: its src/ layout and its dependency folder on PYTHONPATH."""
    paths = (["src"] if (root / "src").is_dir() else []) + ([pythonpath_entry(deps_key)] if deps_key else [])
    pythonpath = f"PYTHONPATH={':'.join(paths)} " if paths else ""
    return f"{pythonpath}python -m pytest -rA -q -p no:cacheprovider -o addopts= --tb=short"


def build_corpus(config: BuildConfig, out_dir: str | Path, log=print) -> tuple[list[Task], list[ProjectReport]]:
    """Build every project of `config` into `out_dir` (snapshots under out_dir/snapshots),
    saving the corpus after each; a project that cannot be built is skipped with its reason.
    Specs are all read first: a malformed one stops the build before anything runs."""
    out = Path(out_dir).resolve()
    sources = [project_source(spec) for spec in config.projects]
    tasks, reports = [], []
    for source in sources:
        try:
            project_tasks, report = build_project(source, out, config, log)
        except (BuildError, TaskError, OSError) as exc:
            report = ProjectReport(source.name, source.version, skipped=str(exc))
            log(f"[{source.name}] skipped: {exc}")
            project_tasks = []
        tasks += project_tasks
        reports.append(report)
        if project_tasks:
            save_corpus(tasks, out)  # atomic: what is validated so far survives a stop
    return tasks, reports


def build_project(pin: ProjectSource, out: Path, config: BuildConfig, log=print) -> tuple[list[Task], ProjectReport]:
    start = time.monotonic()
    report = ProjectReport(pin.name, pin.version)
    root = pin.materialise(out / "snapshots" / f"{pin.name}-{pin.version}")
    requirements = declared_requirements(root, config.env.python)
    deps_key = ensure_deps(requirements, config.env.python)
    report.dependencies = len(requirements)
    if requirements:
        log(f"[{pin.name}] dependencies installed: {', '.join(requirements)}")
    project = replace(discover(root, deps_key), requirements=tuple(requirements))
    clean = read_tree(root)
    env = config.env
    runner = make_runner(env)
    workers = env.worker_count()
    scratch = Path(tempfile.mkdtemp(prefix=f"build-{pin.name}-", dir=_scratch(env)))
    spaces = [Workspace(scratch / f"w{i}", clean) for i in range(workers)]
    free: queue.Queue[Workspace] = queue.Queue()  # each job borrows a copy no other job is using
    for ws in spaces:
        free.put(ws)
    # A test module whose own dependencies are missing is skipped, not fatal to the suite.
    suite = " ".join([project.test_cmd, "--continue-on-collection-errors", *map(shlex.quote, project.test_files)])

    baseline_s, stable, total = _stable_tests(runner, spaces[0], suite, config.baseline_runs)
    report.tests_total, report.tests_stable = total, len(stable)
    if not stable:
        raise BuildError(
            f"{pin.spec}: no test passes reliably in the sandbox; the project may need plugins or dependencies"
        )
    log(f"[{pin.name}] {len(stable)}/{total} stable tests; suite {baseline_s:.2f}s")
    mutant_env = env.model_copy(
        update={"limits": env.limits.model_copy(update={"wall_timeout_s": max(20.0, 5 * baseline_s)})}
    )
    mutant_runner = make_runner(mutant_env)

    candidates = [(f, m) for f in project.source_files for m in mutations(clean[f].decode())]
    random.Random(f"{config.seed}-{pin.name}").shuffle(candidates)
    candidates = candidates[: config.max_mutants_per_project]
    kept: list[Task] = []
    with ThreadPoolExecutor(workers) as pool, GradingPool(env, workers=workers) as grader:
        for i in range(0, len(candidates), workers * 2):
            if len(kept) >= config.tasks_per_project:
                break
            batch = candidates[i : i + workers * 2]
            jobs = [
                pool.submit(_try_mutant, free, suite, mutant_runner, stable, config, pin, project, f, m)
                for f, m in batch
            ]
            drafts = [job.result() for job in jobs]
            report.mutants_tried += len(batch)
            fresh = []
            for outcome in drafts:
                if isinstance(outcome, str):
                    report.rejected[outcome] = report.rejected.get(outcome, 0) + 1
                else:
                    fresh.append(outcome)
            checked = _validate(grader, fresh)
            for task, reason in checked:
                if reason:
                    report.rejected[reason] = report.rejected.get(reason, 0) + 1
                elif len(kept) < config.tasks_per_project:
                    kept.append(task)
    for ws in spaces:
        ws.destroy()
    report.kept, report.heldout = len(kept), sum(t.split == "heldout" for t in kept)
    report.seconds = time.monotonic() - start
    log(
        f"[{pin.name}] kept {report.kept} tasks ({report.heldout} held out) from {report.mutants_tried} mutants "
        f"in {report.seconds:.0f}s; rejected {report.rejected}"
    )
    return kept, report


def _stable_tests(runner, ws: Workspace, suite: str, runs: int) -> tuple[float, list[str], int]:
    passed_all: set[str] | None = None
    seen: set[str] = set()
    durations = []
    for _ in range(runs):
        run = runner.run(suite, ws.root)
        ws.reset()
        durations.append(run.duration_s)
        status, _ = parse_statuses(frame_log(run.output, 0), LOG_PARSER)
        seen |= set(status)
        # An id with unbalanced brackets was cut at a space by the parser: not a usable test id.
        passed = {t for t, s in status.items() if s == "PASSED" and t.count("[") == t.count("]")}
        passed_all = passed if passed_all is None else passed_all & passed
    return max(durations), sorted(passed_all or ()), len(seen)


def _try_mutant(
    free: queue.Queue[Workspace],
    suite: str,
    runner,
    stable: list[str],
    config: BuildConfig,
    pin: ProjectSource,
    project: Project,
    rel: str,
    mutation: Mutation,
) -> Task | str:
    """One mutant's suite run; a draft task, or the reason it was rejected."""
    ws = free.get()
    try:
        original = ws.base[rel].decode()
        mutant = mutation.apply(original)
        (ws.root / rel).write_text(mutant)
        run = runner.run(suite, ws.root)
        ws.reset()
    finally:
        free.put(ws)
    if run.timed_out:
        return "timeout"
    status, valid = parse_statuses(frame_log(run.output, run.exit_code), LOG_PARSER)
    if not status or any(t not in status for t in stable):
        return "import_or_collection_error"
    broken = [t for t in stable if status[t] != "PASSED"]
    if not broken:
        return "no_failing_test"
    if len(broken) > config.max_f2p:
        return "too_many_failures"
    files = {t.split("::")[0] for t in broken}
    p2p = [t for t in stable if t.split("::")[0] in files and t not in broken]
    bug_patch = unified_diff({rel: original.encode()}, {rel: mutant.encode()})
    gold = unified_diff({rel: mutant.encode()}, {rel: original.encode()})
    ident = f"{pin.name}-{pin.version}-{hashlib.sha256(bug_patch.encode()).hexdigest()[:10]}"
    heldout = int(hashlib.sha256(ident.encode()).hexdigest(), 16) % 1000 < config.heldout_fraction * 1000
    meta = {
        "bug_patch": bug_patch,
        "bug": mutation.kind,
        "file": rel,
        "line": mutation.line,
        "test_files": list(project.test_files),
    }
    if project.requirements:
        meta["requirements"] = list(project.requirements)  # to install them again where the corpus is used
    return Task(
        instance_id=ident,
        repo=pin.name,
        version=pin.version,
        base_commit=hashlib.sha256((pin.sha256 + bug_patch).encode()).hexdigest()[:16],
        problem_statement=_problem_statement(pin, broken, run.output),
        patch=gold,
        test_patch="",
        FAIL_TO_PASS=tuple(broken),
        PASS_TO_PASS=tuple(p2p),
        test_cmd=project.test_cmd,
        log_parser=LOG_PARSER,
        env_name="swe",
        split="heldout" if heldout else "train",
        snapshot_uri=str(project.root),
        metadata=json.dumps(meta),
    )


def _validate(grader: GradingPool, drafts: list[Task]) -> list[tuple[Task, str]]:
    """The gold patch must resolve the task with the real grader (targeted tests, sandboxed).

    The empty patch needs no run here: the suite run of the mutant already saw every
    FAIL_TO_PASS test fail (the corpus tests re-check it through the grader).
    """
    if not drafts:
        return []
    results = grader.grade_many([(t, t.patch) for t in drafts])
    return [
        (t, "" if g.resolved else ("gold_infra_failure" if g.infra_failure else "gold_not_resolving"))
        for t, g in zip(drafts, results)
    ]


def _problem_statement(pin: ProjectSource, broken: list[str], output: str, limit: int = 1500) -> str:
    summary = [line for line in output.splitlines() if line.startswith("FAILED ") and line.split()[1] in broken]
    errors = [line for line in output.splitlines() if line.startswith("E ")][:12]
    text = (
        f"Some tests of {pin.name} {pin.version} fail. Fix the source code so they pass; the tests are correct.\n"
        "Failing tests:\n"
        + "\n".join(summary[:8] or [f"FAILED {t}" for t in broken[:8]])
        + ("\nAssertion output:\n" + "\n".join(errors) if errors else "")
    )
    return text if len(text) <= limit else text[: limit - 15] + "\n[truncated]"


def _scratch(env: EnvConfig) -> str:
    Path(env.scratch_dir).mkdir(parents=True, exist_ok=True)
    return env.scratch_dir
