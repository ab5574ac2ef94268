"""A task corpus on disk, and SWE-bench-style JSONL in and out.

Layout of a corpus directory:
    tasks.parquet           one row per task (storage.schema.TASKS), written atomically
    snapshots/<name>/       upstream trees the tasks' snapshot_uri point to
Inside the Parquet file snapshot_uri is relative to the corpus directory, so a
corpus can be moved or copied whole; `load_corpus` makes it absolute again.
Inline snapshots (micro tasks keep their files in metadata) need no directory.

JSONL follows SWE-bench: FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded lists.
Imported records need instance_id, repo, patch, FAIL_TO_PASS and a snapshot (a
`snapshot_uri` field, or a directory named after the instance under
`snapshots_dir`); the other fields get pytest defaults.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from engines.env.errors import TaskError
from engines.env.types import Task
from engines.env.workspace import base_files, tree_hash
from storage import layout
from storage.atomic import write_file_atomic
from storage.fs import Store, open_store
from storage.parquet_io import read_table, write_table
from storage.schema import TASKS

TASKS_FILE = "tasks.parquet"
SNAPSHOTS = "snapshots"
DEFAULT_TEST_CMD = "python -m pytest -rA -q -p no:cacheprovider -o addopts= --tb=short"


def save_corpus(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write `tasks` to `path/tasks.parquet`, copying outside snapshots under `path/snapshots/`."""
    root = Path(path).resolve()
    rows = []
    for task in tasks:
        row = task.to_row()
        row["snapshot_uri"] = _relative_snapshot(task, root)
        rows.append(row)
    store = open_store(str(root))
    write_table(store, TASKS_FILE, pa.Table.from_pylist(rows, schema=TASKS), "tasks")
    return root / TASKS_FILE


def load_corpus(path: str | Path) -> list[Task]:
    """Tasks of a corpus directory (or of a tasks.parquet file), snapshot paths made absolute."""
    p = Path(path).resolve()
    file = p if p.is_file() else p / TASKS_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found: build a corpus with 'tandem tasks build' or give its directory")
    root = file.parent
    table = read_table(open_store(str(root)), str(file))
    tasks = []
    for row in table.to_pylist():
        uri = row.get("snapshot_uri") or ""
        if uri and not os.path.isabs(uri) and "://" not in uri:
            row["snapshot_uri"] = str(root / uri)
        tasks.append(Task.from_row(row))
    return tasks


def run_tasks(store: Store, run: str, corpus_path: str | None = None) -> list[Task]:
    """The tasks a run stored beside its rollouts (`<run>/tasks/*.parquet`). Snapshot
    paths there are relative to the corpus the run read; `corpus_path` (a directory)
    makes them absolute. Micro tasks carry their files inline and need none."""
    pattern = store.path(layout.GLOBS["tasks"].format(run=layout.check_name("run", run)))
    files = sorted(store.call("list tasks", lambda: store.fs.glob(pattern)))
    if not files:
        raise FileNotFoundError(f"run {run!r} under {store.display} stored no tasks (expected {pattern})")
    tasks = []
    for file in files:
        for row in read_table(store, file).to_pylist():
            uri = row.get("snapshot_uri") or ""
            if uri and not os.path.isabs(uri) and "://" not in uri:
                if corpus_path is None:
                    raise FileNotFoundError(
                        f"task {row['instance_id']} of run {run!r} needs its corpus's snapshots ({uri}): "
                        "give the corpus directory the run used"
                    )
                row["snapshot_uri"] = str(Path(corpus_path).resolve() / uri)
            tasks.append(Task.from_row(row))
    return tasks


def corpus_id(tasks: Iterable[Task]) -> str:
    """sha256 of the tasks' rows in instance_id order, without snapshot_uri (where a
    snapshot lies, not what it holds: base_commit is the content hash of the tree), so
    the same tasks give the same id wherever the corpus is stored."""
    digest = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.instance_id):
        row = task.to_row()
        row.pop("snapshot_uri")
        digest.update(json.dumps(row, sort_keys=True).encode())
        digest.update(b"\n")
    return f"sha256:{digest.hexdigest()}"


def export_jsonl(tasks: Iterable[Task], path: str | Path) -> Path:
    """SWE-bench-style records, one JSON line per task; the file appears whole or not at all."""
    out = Path(path)
    lines = []
    for task in tasks:
        row = task.to_row()
        row["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])
        row["PASS_TO_PASS"] = json.dumps(row["PASS_TO_PASS"])
        lines.append(json.dumps(row) + "\n")
    write_file_atomic(out, "".join(lines).encode())
    return out


def import_jsonl(path: str | Path, snapshots_dir: str | Path | None = None, split: str = "train") -> list[Task]:
    """SWE-bench-style records to tasks; an error names the line and instance that is wrong."""
    tasks = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{lineno}: not JSON ({exc})") from exc
            tasks.append(task_from_record(record, snapshots_dir, split, f"{path}:{lineno}"))
    return tasks


def task_from_record(record: dict, snapshots_dir: str | Path | None, split: str, where: str) -> Task:
    """One SWE-bench-style record as a task; `where` names it in errors (file:line)."""
    ident = record.get("instance_id")
    missing = [k for k in ("instance_id", "repo", "patch", "FAIL_TO_PASS") if not record.get(k)]
    if missing:
        raise TaskError(f"{where} (instance {ident or '?'}): missing {missing}; SWE-bench records need them")
    snapshot = record.get("snapshot_uri") or ""
    if not snapshot and snapshots_dir is not None:
        snapshot = str(Path(snapshots_dir) / ident)
    if not snapshot and not json.loads(record.get("metadata") or "{}").get("files"):
        raise TaskError(
            f"{where} (instance {ident}): no snapshot; give snapshot_uri or snapshots_dir/{ident}/ holding the repo at base_commit"
        )
    row = (
        {
            "version": "",
            "base_commit": "",
            "problem_statement": "",
            "test_patch": "",
            "PASS_TO_PASS": "[]",
            "test_cmd": DEFAULT_TEST_CMD,
            "log_parser": "parse_log_pytest",
            "env_name": "swe",
            "split": split,
            "metadata": "{}",
        }
        | {k: v for k, v in record.items() if v is not None and k in TASKS.names}
        | {"snapshot_uri": snapshot}
    )
    try:
        task = Task.from_row(row)
    except ValueError as exc:
        raise TaskError(f"{where}: {exc}") from exc
    if not task.base_commit:
        from dataclasses import replace

        task = replace(task, base_commit=tree_hash(base_files(task)))
    return task


def _relative_snapshot(task: Task, root: Path) -> str:
    if not task.snapshot_uri:
        return ""
    src = Path(task.snapshot_uri.removeprefix("file://")).resolve()
    if root in src.parents:
        return str(src.relative_to(root))
    if not src.is_dir():
        raise TaskError(f"task {task.instance_id}: snapshot {task.snapshot_uri} does not exist; cannot save the corpus")
    dest = root / SNAPSHOTS / src.name
    if not dest.exists():
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(dest.relative_to(root))
