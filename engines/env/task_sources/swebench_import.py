"""SWE-bench-style records (instance_id, repo, base_commit, patch, test_patch,
FAIL_TO_PASS, PASS_TO_PASS, ...) to a task corpus, with each repository materialised
from a source the user names:

    sources = {"pallets/flask": "/src/flask",            # a local git clone: `git archive <base_commit>`
               "tkem/cachetools": "cachetools"}          # a pinned sdist (its version stands for the commit)
    tasks = import_records("swe.jsonl", "corpus/", sources)

A git source gives each base commit its own snapshot (records at the same commit share
one); an sdist gives one snapshot for all its records. The project's declared
dependencies are installed as for built tasks (deps.py). A record whose repository has
no source, or whose commit the clone lacks, is an error naming the record.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from engines.env.errors import TaskError
from engines.env.sandbox.deps import declared_requirements, ensure_deps
from engines.env.task_sources.builder import test_command
from engines.env.task_sources.corpus import SNAPSHOTS, task_from_record
from engines.env.task_sources.sources import project_source
from engines.env.types import Task
from storage.atomic_dir import atomic_dir


def import_records(
    path: str | Path, out: str | Path, sources: dict[str, str], split: str = "train", python: str | None = None
) -> list[Task]:
    """Tasks of the JSONL file `path`, snapshots materialised under `out/snapshots/`."""
    import sys

    python = python or sys.executable
    out = Path(out).resolve()
    commands: dict[Path, tuple[str, list[str]]] = {}  # snapshot -> (test command, requirements), once each
    tasks = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{where}: not JSON ({exc})") from None
            snapshot = _materialise(record, sources, out / SNAPSHOTS, where)
            if snapshot not in commands:
                requirements = declared_requirements(snapshot, python)
                commands[snapshot] = (test_command(snapshot, ensure_deps(requirements, python)), requirements)
            cmd, requirements = commands[snapshot]
            meta = json.loads(record.get("metadata") or "{}") | ({"requirements": requirements} if requirements else {})
            record = {"test_cmd": cmd} | record | {"snapshot_uri": str(snapshot), "metadata": json.dumps(meta)}
            tasks.append(task_from_record(record, None, split, where))
    return tasks


def _materialise(record: dict, sources: dict[str, str], snapshots: Path, where: str) -> Path:
    repo, commit = record.get("repo") or "", record.get("base_commit") or ""
    spec = sources.get(repo)
    if spec is None:
        raise TaskError(
            f"{where} (instance {record.get('instance_id')}): no source for repository {repo!r}; "
            f"give one with --repo {repo}=PATH_TO_GIT_CLONE or --repo {repo}=NAME==VERSION:SHA256"
        )
    name = repo.rsplit("/", 1)[-1]
    if (Path(spec) / ".git").exists():
        if not commit:
            raise TaskError(f"{where}: base_commit is empty; a git source needs the commit to check out")
        dest = snapshots / f"{name}-{commit[:12]}"
        if not dest.is_dir():
            _git_archive(Path(spec), commit, dest, where)
        return dest
    source = project_source(spec)
    dest = snapshots / f"{source.name}-{source.version}"
    return dest if dest.is_dir() else source.materialise(dest)


def _git_archive(clone: Path, commit: str, dest: Path, where: str) -> None:
    """The tree of `commit` (no .git, no untracked files), staged and committed whole (storage/atomic_dir.py)."""
    proc = subprocess.run(
        ["git", "-C", str(clone), "archive", "--format=tar", commit], capture_output=True, timeout=600
    )
    if proc.returncode != 0:
        raise TaskError(
            f"{where}: {clone} has no commit {commit} ({proc.stderr.decode(errors='replace').strip()}); "
            "fetch it into the clone first"
        )
    with atomic_dir(dest) as stage, tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
        archive.extractall(stage, filter="data")
