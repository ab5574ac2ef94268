"""What makes a run reproducible from its lake: the code version, the task corpus's
identity and the resolved configuration, recorded as a row of the `runs` table at
every start (storage/runs.py)."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engines.env.task_sources.corpus import corpus_id, load_corpus
from engines.env.types import Task

_REPO = Path(__file__).resolve().parents[1]


@functools.cache
def code_version() -> str:
    """`git:<commit>` of the checkout this code runs from (`+dirty` when tracked files
    differ from it); `tandem-rl <version>` for an installed package; else `unknown`."""
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return f"git:{commit}{'+dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        pass  # not a checkout (or no git): fall back to the installed package
    try:
        return f"tandem-rl {importlib.metadata.version('tandem-rl')}"
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def start_record(config: BaseModel, kind: str, corpus_dir: str | None, **extra: Any) -> dict[str, Any]:
    """A `runs` row for a start of `kind` with `config` (every field, defaults included)
    and the corpus in `corpus_dir`. `extra` holds other columns: source_root,
    source_run, source_steps for replays, or corpus_* columns a replay copies."""
    record: dict[str, Any] = {"kind": kind, "config": config.model_dump_json(), "code_version": code_version()}
    if corpus_dir is not None:
        record.update(corpus_fields(load_corpus(corpus_dir), corpus_dir))
    return record | extra


def corpus_fields(tasks: list[Task], corpus_path: str | None) -> dict[str, Any]:
    return {"corpus_id": corpus_id(tasks), "corpus_path": corpus_path, "num_tasks": len(tasks)}
