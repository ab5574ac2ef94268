"""Real-repository tasks, SWE-smith style: sdist -> stable tests -> AST mutants -> validated tasks.

For each project (a pinned sdist or a local folder, sources.py):
  1. download (pinned, cached) and unpack it, or copy the folder, as the corpus's
     snapshot of the project;
  2. find its pytest test files and source files (generic: any pure-Python project),
     and install its declared dependencies into a folder of their own (deps.py);
  3. run the suite `baseline_runs` times in the sandbox; tests PASSED every time are stable;
  4. for mutants of source files (mutations.py), run the suite on the mutant and keep
     it when every stable test was still collected (imports work) and 1 to `max_f2p`
     stable tests went from passing to failing. Cheap cuts that keep the same tasks: a
     mutant inside a function the clean suite never calls is not run (one traced run
     finds them, `skip_uncalled`), a run stops once it broke more than `max_f2p` tests
     (`stop_after`), and a looping mutant is stopped at 4x the clean suite's time;
  5. write the task: bug_patch (clean -> mutant) defines its base, the gold patch
     reverts it, FAIL_TO_PASS are the broken tests, PASS_TO_PASS the other stable tests
     of the same test files; the problem statement gives failing test names and their
     assertion output, not the answer;
  6. validate with the real grader: the gold patch resolves the task.
A project that cannot be built (no tests, no stable test, dependencies that do not
install, a download that fails) is reported with its reason and skipped; the other
projects' tasks are kept, and the corpus is saved after each project, so a build
stopped midway keeps what it validated.

Resuming and caching (a full corpus takes hours on a small machine): each finished
project is recorded in `out/projects/<name>-<version>.json` (its tasks, its report
and a key: sha256 of the pin, the BuildConfig fields that decide which tasks are
kept, the sandbox settings and the builder's own code, `project_key`), written
atomically after its snapshot is complete. A later build into the same folder reuses
every project whose key is unchanged; otherwise a copy of the same key in the
content cache `<cache>/corpora/<key>/` ($TANDEM_CACHE, else ~/.cache/tandem-rl) is
copied in; otherwise the project is built and then cached. A crash loses at most the
project in progress. Splits (splits.py: held-out projects, a hash-chosen share of the
other projects' tasks) are applied when the corpus is assembled, so they are not part
of the key: changing them re-splits without rebuilding.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import random
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engines.env.config import EnvConfig
from engines.env.errors import BuildError, TaskError
from engines.env.grader import GradingPool
from engines.env.report import frame_log, parse_statuses
from engines.env.sandbox.deps import declared_requirements, ensure_deps, ensure_task_deps, pythonpath_entry
from engines.env.sandbox.interpreter import python_layout
from engines.env.sandbox.runner import make_runner
from engines.env.task_sources.corpus import save_corpus
from engines.env.task_sources.mutations import Mutation, enclosing_name, function_starts, mutations
from engines.env.task_sources.sdists import DEFAULT_PINS
from engines.env.task_sources.sources import ProjectSource, project_source
from engines.env.task_sources.splits import assign_split
from engines.env.types import Task
from engines.env.workspace import Workspace, read_tree, unified_diff
from storage.atomic import write_file_atomic
from storage.atomic_dir import atomic_dir

Log = Callable[[str], None]

LOG_PARSER = "parse_log_pytest"
_SKIP_DIRS = {
    "docs",
    "doc",
    "examples",
    "example",
    "benchmarks",
    "benchmark",
    "bench",
    "tools",  # maintainers' scripts (python-slugify's reference implementations the tests compare against)
    "bin",
    "build",
    "dist",
    "scripts",
    ".git",
    ".github",
}
# Projects whose every task is held out by default: mid-sized ones (not the projects
# with the most stable tests or mutants), in domains the training projects also touch
# (validation: schema; text formatting: humanize, inflection), so a gain on them says
# the policy fixes bugs in code it never trained on.
DEFAULT_HELDOUT_PROJECTS = ("voluptuous", "tabulate")
# The modules whose code decides which tasks a project gives (part of each project's key).
BUILDER_MODULES = (
    "engines/env/task_sources/builder.py",
    "engines/env/task_sources/mutations.py",
    "engines/env/task_sources/sdists.py",
    "engines/env/task_sources/sources.py",
    "engines/env/sandbox/deps.py",
)
_REPO = Path(__file__).resolve().parents[3]
MANIFESTS = "projects"  # out/projects/<name>-<version>.json: one finished project each
MANIFEST_FILE = "project.json"  # inside a cache entry, beside its snapshots/


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
        description="Share of the training projects' tasks put in the held-out split (by a hash of the id: stable "
        "across rebuilds); metadata 'heldout': 'task'.",
    )
    heldout_projects: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HELDOUT_PROJECTS),
        description="Projects (by name) whose every task is held out, metadata 'heldout': 'project': does the policy "
        "fix bugs in code it never trained on. Default: voluptuous and tabulate, two mid-sized default projects "
        "(not the biggest). Applied when the corpus is assembled: changing it rebuilds nothing.",
    )
    seed: int = Field(0, description="Seed of the mutant order.")
    skip_uncalled: bool = Field(
        True,
        description="Trace which functions the clean suite calls (one extra suite run) and reject mutants of the "
        "others without running them ('never_called'): they cannot fail a test, so the tasks kept are the same, "
        "sooner. A function only a subprocess calls is skipped too (a candidate lost, never a wrong task).",
    )
    use_cache: bool = Field(
        True,
        description="Copy a project whose key is in the content cache (<cache>/corpora/<key>) instead of building "
        "it, and cache each project built. The key covers everything that decides its tasks, so False only costs "
        "time (for measuring a build, or a cache on a full disk).",
    )
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
    baseline_s: float = 0.0  # the slowest clean suite run (a mutant run costs about as much)
    mutants_s: float = 0.0  # seconds spent trying mutants (suite runs and validation), set-up aside
    run_s: dict[str, float] = field(default_factory=dict)  # sandboxed suite seconds by outcome (where time goes)
    heldout_project: bool = False  # every task held out (BuildConfig.heldout_projects)
    origin: Literal["built", "resumed", "cache", ""] = ""  # built now, reused from out/, copied from the cache

    @property
    def s_per_mutant(self) -> float:
        """Wall seconds per mutant tried, with the mutants' validation, without set-up."""
        return self.mutants_s / self.mutants_tried if self.mutants_tried else 0.0

    @property
    def s_per_task(self) -> float:
        """Wall seconds per kept task, everything included (download, baseline runs)."""
        return self.seconds / self.kept if self.kept else 0.0


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


def build_corpus(config: BuildConfig, out_dir: str | Path, log: Log = print) -> tuple[list[Task], list[ProjectReport]]:
    """Build every project of `config` into `out_dir` (snapshots under out_dir/snapshots,
    one manifest per finished project under out_dir/projects), saving the corpus after
    each; a project that cannot be built is skipped with its reason. Projects finished
    by an earlier build with the same key are reused, or copied from the content cache.
    Specs are all read first: a malformed one stops the build before anything runs."""
    out = Path(out_dir).resolve()
    sources = [project_source(spec) for spec in config.projects]
    held = [s.name for s in sources if s.name in config.heldout_projects]
    if held:
        log(f"[build] held out as whole projects: {', '.join(held)}")
    progress = Progress(wanted=config.tasks_per_project * len(sources))
    tasks: list[Task] = []
    reports: list[ProjectReport] = []
    for i, source in enumerate(sources, 1):
        log(f"[{source.name}] ({i}/{len(sources)}) {source.name} {source.version}: start")
        project_tasks, report = project_tasks_for(source, out, config, log, progress)
        tasks += project_tasks
        reports.append(report)
        progress.kept_before += len(project_tasks)
        log(_end_line(report, config))
        if project_tasks:
            save_corpus(tasks, out)  # atomic: what is validated so far survives a stop
    return tasks, reports


def assemble_corpus(config: BuildConfig, out_dir: str | Path, log: Log = print) -> list[Task]:
    """The split tasks of every project of `config` already finished in `out_dir` (a
    manifest with the current key), saved as its corpus; projects not finished there are
    named and left out. For builds that ran each project on its own (flows/build_tasks.py)."""
    out = Path(out_dir).resolve()
    tasks: list[Task] = []
    for source in (project_source(spec) for spec in config.projects):
        key, _ = project_key(source, config)
        manifest = _read_manifest(manifest_path(out, source))
        if not manifest or manifest.get("key") != key:
            log(f"[{source.name}] not finished in {out}: left out of the corpus")
            continue
        tasks += [assign_split(t, config.heldout_projects, config.heldout_fraction) for t in _tasks_from(manifest, out)]
    if tasks:
        save_corpus(tasks, out)
    return tasks


@dataclass
class Progress:
    """Counts across a whole build, for the progress lines."""

    wanted: int  # tasks wanted over all projects
    kept_before: int = 0  # kept by the projects finished so far


def project_tasks_for(
    source: ProjectSource, out: Path, config: BuildConfig, log: Log = print, progress: Progress | None = None
) -> tuple[list[Task], ProjectReport]:
    """One project's split tasks and report: reused from `out` when its manifest has the
    current key and its snapshot is there, copied from the content cache when the key is
    cached, else built (then recorded in `out` and the cache). A project that cannot be
    built gives no task and a report saying why."""
    out = Path(out).resolve()
    try:
        key, inputs = project_key(source, config)
        tasks, report = _reuse(source, out, key, log, config.use_cache)
        if tasks is None:
            tasks, report = build_project(source, out, config, log, progress)
            report.origin = "built"
            _record(source, out, key, inputs, tasks, report, config.use_cache, log)
        if any(t.meta().get("requirements") for t in tasks):
            ensure_task_deps(tasks, config.env.python)  # a corpus copied from elsewhere: its dependency folders
    except (BuildError, TaskError, OSError) as exc:
        log(f"[{source.name}] skipped: {exc}")
        return [], ProjectReport(source.name, source.version, skipped=str(exc))
    tasks = [assign_split(t, config.heldout_projects, config.heldout_fraction) for t in tasks]
    report.kept, report.heldout = len(tasks), sum(t.split == "heldout" for t in tasks)
    report.heldout_project = source.name in config.heldout_projects
    return tasks, report


def project_key(source: ProjectSource, config: BuildConfig) -> tuple[str, dict[str, Any]]:
    """16 hex digits of the sha256 of everything that decides a project's tasks, and
    those inputs: the project's content (the pin's sha256, or a folder's tree hash),
    the build settings that choose mutants and keep them, the sandbox's limits and
    interpreter (its version and packages), and the builder's own code (BUILDER_MODULES).
    Not in it: workers, scratch folders (where and how fast, not what), and the split
    settings."""
    env = config.env
    inputs = {
        "project": {"name": source.name, "version": source.version, "sha256": source.sha256},
        "build": config.model_dump(
            include={
                "tasks_per_project",
                "max_mutants_per_project",
                "baseline_runs",
                "max_f2p",
                "seed",
                "skip_uncalled",
            }
        ),
        "env": {
            "backend": env.backend,
            "limits": env.limits.model_dump(),
            "python": _python_version(env.python),
            # A task is valid only with what its tests can import: the sandbox interpreter's packages.
            "packages": list(python_layout(env.python).packages),
            "warm_pytest": env.warm_pytest,
        },
        "code": builder_digest(),
    }
    text = json.dumps(inputs, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16], inputs


def builder_digest(modules: tuple[str, ...] = BUILDER_MODULES, root: Path = _REPO) -> str:
    """sha256 over the path and bytes of each builder module: a change to how tasks are
    made invalidates finished projects and cached corpora."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.encode() + b"\0" + (root / module).read_bytes() + b"\0")
    return digest.hexdigest()


def corpus_cache_root() -> Path:
    """Where finished projects are cached by key (the same convention as warm starts)."""
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem-rl")) / "corpora"


def manifest_path(out: Path, source: ProjectSource) -> Path:
    return Path(out) / MANIFESTS / f"{_slug(source)}.json"


def _slug(source: ProjectSource) -> str:
    return f"{source.name}-{source.version}"


@functools.cache
def _python_version(python: str) -> str:
    """The sandbox interpreter's version: a different Python may pass different tests."""
    proc = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)
    return proc.stdout.strip() or python


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tasks_from(manifest: dict[str, Any], root: Path) -> list[Task]:
    """Tasks of a manifest, their snapshot paths (relative in the file) made absolute under `root`."""
    return [Task.from_row({**row, "snapshot_uri": str(root / row["snapshot_uri"])}) for row in manifest["tasks"]]


def _report_from(manifest: dict[str, Any], origin: Literal["resumed", "cache"]) -> ProjectReport:
    fields = {k: v for k, v in manifest["report"].items() if k in ProjectReport.__dataclass_fields__}
    return replace(ProjectReport(**fields), origin=origin)


def _reuse(
    source: ProjectSource, out: Path, key: str, log: Log, use_cache: bool = True
) -> tuple[list[Task] | None, ProjectReport]:
    """The project's tasks from `out` (a finished earlier build) or the content cache,
    or (None, empty report) when it must be built."""
    snapshot = out / "snapshots" / _slug(source)
    manifest = _read_manifest(manifest_path(out, source))
    if manifest and manifest.get("key") == key and snapshot.is_dir():
        log(f"[{source.name}] already built in {out} (key {key}): reused")
        return _tasks_from(manifest, out), _report_from(manifest, "resumed")
    if not use_cache:
        return None, ProjectReport(source.name, source.version)
    entry = corpus_cache_root() / key
    cached = _read_manifest(entry / MANIFEST_FILE)
    if cached and cached.get("key") == key and (entry / "snapshots" / _slug(source)).is_dir():
        with atomic_dir(snapshot) as stage:
            shutil.copytree(entry / "snapshots" / _slug(source), stage, dirs_exist_ok=True)
        write_file_atomic(manifest_path(out, source), json.dumps(cached).encode())
        log(f"[{source.name}] copied from the corpus cache (key {key}, {entry}): not rebuilt")
        return _tasks_from(cached, out), _report_from(cached, "cache")
    return None, ProjectReport(source.name, source.version)


def _record(
    source: ProjectSource,
    out: Path,
    key: str,
    inputs: dict[str, Any],
    tasks: list[Task],
    report: ProjectReport,
    use_cache: bool = True,
    log: Log = print,
) -> None:
    """Write the finished project's manifest into `out` (after its snapshot, so a
    manifest always names a complete one), then a copy of both into the cache."""
    rows = []
    for task in tasks:
        row = task.to_row()
        row["snapshot_uri"] = os.path.relpath(task.snapshot_uri, out)
        rows.append(row)
    data = json.dumps({"key": key, "inputs": inputs, "report": asdict(report), "tasks": rows}, indent=1).encode()
    write_file_atomic(manifest_path(out, source), data)
    entry = corpus_cache_root() / key
    if not use_cache or entry.is_dir():
        return
    try:
        with atomic_dir(entry, replace=False) as stage:
            shutil.copytree(out / "snapshots" / _slug(source), stage / "snapshots" / _slug(source))
            (stage / MANIFEST_FILE).write_bytes(data)
    except OSError as exc:  # a cache that cannot be written costs speed later, not this build
        log(f"[{source.name}] not cached ({exc})")


def _end_line(report: ProjectReport, config: BuildConfig) -> str:
    if report.skipped:
        return f"[{report.name}] done: skipped"
    held = " (held-out project)" if report.heldout_project else f" ({report.heldout} held out)"
    if report.origin != "built":
        return f"[{report.name}] done: {report.kept} tasks{held} {'reused' if report.origin == 'resumed' else 'from the cache'}"
    return (
        f"[{report.name}] done: kept {report.kept}/{config.tasks_per_project}{held} from "
        f"{report.mutants_tried} mutants in {report.seconds:.0f}s "
        f"({report.s_per_mutant:.2f} s/mutant, {report.s_per_task:.1f} s/task; suite {report.baseline_s:.2f}s); "
        f"rejected {report.rejected}; suite seconds by outcome {report.run_s}"
    )


def build_project(
    pin: ProjectSource, out: Path, config: BuildConfig, log: Log = print, progress: Progress | None = None
) -> tuple[list[Task], ProjectReport]:
    """Build one project's tasks now (no reuse; splits not applied: every task 'train')."""
    start = time.monotonic()
    report = ProjectReport(pin.name, pin.version)
    dest = out / "snapshots" / _slug(pin)
    with atomic_dir(dest) as stage:  # a crash never leaves half a snapshot under the final name
        pin.materialise(stage)
    root = dest
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
    try:
        kept = _mutate_and_keep(pin, project, config, runner, spaces, report, log, progress or Progress(0))
    finally:
        for ws in spaces:
            ws.destroy()
        shutil.rmtree(scratch, ignore_errors=True)
    report.kept = len(kept)
    report.seconds = time.monotonic() - start
    return kept, report


def _mutate_and_keep(
    pin: ProjectSource,
    project: Project,
    config: BuildConfig,
    runner,
    spaces: list[Workspace],
    report: ProjectReport,
    log: Log,
    progress: Progress,
) -> list[Task]:
    """Stable tests first, then mutants in seeded order, a batch at a time, until
    `tasks_per_project` validated tasks or `max_mutants_per_project` tried."""
    env, workers = config.env, len(spaces)
    free: queue.Queue[Workspace] = queue.Queue()  # each job borrows a copy no other job is using
    for ws in spaces:
        free.put(ws)
    # A test module whose own dependencies are missing is skipped, not fatal to the suite.
    suite = " ".join([project.test_cmd, "--continue-on-collection-errors", *map(shlex.quote, project.test_files)])

    baseline_s, stable, total = _stable_tests(runner, spaces[0], suite, config.baseline_runs)
    report.tests_total, report.tests_stable, report.baseline_s = total, len(stable), baseline_s
    if not stable:
        raise BuildError(
            f"{pin.spec}: no test passes reliably in the sandbox; the project may need plugins or dependencies"
        )
    log(f"[{pin.name}] {len(stable)}/{total} stable tests; suite {baseline_s:.2f}s")
    mutant_env = env.model_copy(
        update={"limits": env.limits.model_copy(update={"wall_timeout_s": mutant_timeout(baseline_s)})}
    )
    mutant_runner = make_runner(mutant_env)
    mutant_suite = f"{suite} --maxfail={stop_after(config.max_f2p, total, len(stable))}"

    candidates = [(f, m) for f in project.source_files for m in mutations(spaces[0].base[f].decode())]
    random.Random(f"{config.seed}-{pin.name}").shuffle(candidates)
    candidates = candidates[: config.max_mutants_per_project]
    called = _called_functions(runner, spaces[0], suite) if config.skip_uncalled else None
    runs = _runnable(candidates, called, {f: function_starts(spaces[0].base[f].decode()) for f in project.source_files})
    if called is not None:
        log(f"[{pin.name}] {sum(ok for *_, ok in runs)}/{len(candidates)} mutants in functions the suite calls")
    kept: list[Task] = []
    start = time.monotonic()
    with ThreadPoolExecutor(workers) as pool, GradingPool(env, workers=workers) as grader:
        for batch, skipped in _batches(runs, workers * 2):
            if len(kept) >= config.tasks_per_project:
                break
            if skipped:  # never called by the suite: no test can fail (the same tasks, without their runs)
                report.rejected["never_called"] = report.rejected.get("never_called", 0) + skipped
            jobs = [
                pool.submit(_try_mutant, free, mutant_suite, mutant_runner, stable, pin, project, f, m, config.max_f2p)
                for f, m in batch
            ]
            drafts = [job.result() for job in jobs]
            report.mutants_tried += len(batch) + skipped
            fresh = []
            for outcome, seconds in drafts:
                name = outcome if isinstance(outcome, str) else "kept_or_validated"
                report.run_s[name] = round(report.run_s.get(name, 0.0) + seconds, 2)
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
            log(
                f"[{pin.name}] {len(kept)}/{config.tasks_per_project} kept, {report.mutants_tried}/{len(candidates)} "
                f"mutants tried, {time.monotonic() - start:.0f}s; corpus {progress.kept_before + len(kept)}/{progress.wanted}"
            )
    report.mutants_s = time.monotonic() - start
    return kept


# Run inside the sandbox in place of `python -m pytest`: the same pytest run, recording
# which functions were called (a profile hook sees each call once, not each line), into
# CALLS_FILE as [relative path, co_firstlineno] pairs. Standard library and pytest only.
CALLS_SCRIPT = ".tandem_calls.py"
CALLS_FILE = ".tandem_calls.json"
_CALLS_SOURCE = f"""
import json, os, sys, threading
seen = set()
def hook(frame, event, arg):
    if event == "call":
        seen.add((frame.f_code.co_filename, frame.f_code.co_firstlineno))
sys.setprofile(hook)
threading.setprofile(hook)
import pytest
try:
    code = pytest.main(sys.argv[1:])
finally:
    sys.setprofile(None)
    root = os.getcwd()
    out = sorted({{(os.path.relpath(os.path.abspath(f), root), n) for f, n in seen if os.path.abspath(f).startswith(root + os.sep)}})
    with open({CALLS_FILE!r}, "w") as fh:
        json.dump(out, fh)
sys.exit(code)
"""


def _called_functions(runner, ws: Workspace, suite: str) -> set[tuple[str, int]] | None:
    """(file, first line) of every function the clean suite calls, or None when the traced
    run gives no answer (then every mutant is run)."""
    command = suite.replace("python -m pytest", f"python {CALLS_SCRIPT}", 1)
    (ws.root / CALLS_SCRIPT).write_text(_CALLS_SOURCE)
    try:
        runner.run(command, ws.root)
        pairs = json.loads((ws.root / CALLS_FILE).read_text())
    except (OSError, ValueError):
        return None
    finally:
        ws.reset()
    return {(str(f), int(n)) for f, n in pairs} or None


def _runnable(
    candidates: list[tuple[str, Mutation]],
    called: set[tuple[str, int]] | None,
    starts: dict[str, list[int | None]],
) -> list[tuple[str, Mutation, bool]]:
    """Each candidate with whether to run it: False for a mutation inside a function the
    clean suite never called (with `called` None, every one runs)."""
    out = []
    for rel, m in candidates:
        lines = starts.get(rel) or []
        first = lines[m.line - 1] if 0 < m.line <= len(lines) else None
        out.append((rel, m, called is None or first is None or (rel, first) in called))
    return out


def _batches(runs: list[tuple[str, Mutation, bool]], size: int) -> Iterator[tuple[list[tuple[str, Mutation]], int]]:
    """Batches of up to `size` candidates to run, in order, each with how many candidates
    not to run came before it (the last batch may be empty, to count the tail)."""
    batch: list[tuple[str, Mutation]] = []
    skipped = 0
    for rel, m, run in runs:
        if not run:
            skipped += 1
            continue
        batch.append((rel, m))
        if len(batch) == size:
            yield batch, skipped
            batch, skipped = [], 0
    if batch or skipped:
        yield batch, skipped


def mutant_timeout(baseline_s: float) -> float:
    """Wall seconds a mutant's suite run may take: 4x the slowest clean run, at least 10 s.
    A mutant that loops forever (a flipped loop condition) costs this much and is rejected;
    at 5x and 20 s, timeouts were a third of a small project's build time."""
    return max(10.0, 4 * baseline_s)


def stop_after(max_f2p: int, tests_seen: int, stable: int) -> int:
    """pytest --maxfail for mutant runs: stop once more stable tests failed than a task may
    have (too_many_failures was half the suite time of parse and semver). Failures of
    tests that are not stable count for pytest too (tests failing or flaky on the clean
    project, and collection errors, which the log parser also names), so they are added:
    a mutant breaking 1..max_f2p stable tests never reaches the limit, and one that
    reaches it broke more than max_f2p stable tests or left stable tests unrun, rejected
    either way."""
    return max_f2p + 1 + (tests_seen - stable)


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
    pin: ProjectSource,
    project: Project,
    rel: str,
    mutation: Mutation,
    max_f2p: int,
) -> tuple[Task | str, float]:
    """One mutant's suite run: a draft task or the reason it was rejected, and the run's seconds."""
    ws = free.get()
    try:
        original = ws.base[rel].decode()
        mutant = mutation.apply(original)
        (ws.root / rel).write_text(mutant)
        run = runner.run(suite, ws.root)
        ws.reset()
    finally:
        free.put(ws)
    return _judge(run, stable, pin, project, rel, mutation, original, mutant, max_f2p), run.duration_s


def _judge(
    run,
    stable: list[str],
    pin: ProjectSource,
    project: Project,
    rel: str,
    mutation: Mutation,
    original: str,
    mutant: str,
    max_f2p: int,
) -> Task | str:
    """A draft task from a mutant's suite run, or the reason it is rejected."""
    if run.timed_out:
        return "timeout"
    status, valid = parse_statuses(frame_log(run.output, run.exit_code), LOG_PARSER)
    # Failed before missing: a run stopped by --maxfail (stop_after) has stable tests left unrun.
    if status and sum(status.get(t, "PASSED") != "PASSED" for t in stable) > max_f2p:
        return "too_many_failures"
    if not status or any(t not in status for t in stable):
        return "import_or_collection_error"
    broken = [t for t in stable if status[t] != "PASSED"]
    if not broken:
        return "no_failing_test"
    files = {t.split("::")[0] for t in broken}
    p2p = [t for t in stable if t.split("::")[0] in files and t not in broken]
    bug_patch = unified_diff({rel: original.encode()}, {rel: mutant.encode()})
    gold = unified_diff({rel: mutant.encode()}, {rel: original.encode()})
    ident = f"{pin.name}-{pin.version}-{hashlib.sha256(bug_patch.encode()).hexdigest()[:10]}"
    summary, errors = _failure_lines(broken, run.output)
    meta = {
        "bug_patch": bug_patch,
        "bug": mutation.kind,
        "file": rel,
        "line": mutation.line,
        # Where the bug is, for hints at prompt time (tasks.hint): the innermost function
        # or class around the mutated line, on the original source; None at module level.
        "function": enclosing_name(original, mutation.line),
        # The failing tests' assertion output, as the problem statement quotes it.
        "failing_output": "\n".join(errors),
        "test_files": list(project.test_files),
    }
    if project.requirements:
        meta["requirements"] = list(project.requirements)  # to install them again where the corpus is used
    return Task(
        instance_id=ident,
        repo=pin.name,
        version=pin.version,
        base_commit=hashlib.sha256((pin.sha256 + bug_patch).encode()).hexdigest()[:16],
        problem_statement=_problem_statement(pin, broken, summary, errors),
        patch=gold,
        test_patch="",
        FAIL_TO_PASS=tuple(broken),
        PASS_TO_PASS=tuple(p2p),
        test_cmd=project.test_cmd,
        log_parser=LOG_PARSER,
        env_name="swe",
        split="train",  # splits.assign_split decides when the corpus is assembled
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


def _failure_lines(broken: list[str], output: str) -> tuple[list[str], list[str]]:
    """pytest's `FAILED id - ...` summary lines of the broken tests, and the first 12
    `E ...` assertion output lines of the run."""
    summary = [line for line in output.splitlines() if line.startswith("FAILED ") and line.split()[1] in broken]
    errors = [line for line in output.splitlines() if line.startswith("E ")][:12]
    return summary, errors


def _problem_statement(
    pin: ProjectSource, broken: list[str], summary: list[str], errors: list[str], limit: int = 1500
) -> str:
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
