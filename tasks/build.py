"""Prefect task that builds one project's tasks (a coarse unit: a whole sdist)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.task_sources.builder import BuildConfig, project_tasks_for
from engines.env.task_sources.sources import project_source
from tasks.progress import say


@task(name="build-project", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10)
def build_project(config: BuildConfig, project: str, out_dir: str) -> dict:
    """Build `project` into the corpus folder `out_dir` (its snapshot and its manifest
    under projects/; reused when an earlier run finished it with the same key, copied
    from the content cache when cached there); returns its report as a small dict.
    A retry after a crash starts the project again: only finished projects are kept."""
    _, report = project_tasks_for(project_source(project), Path(out_dir), config, log=say)
    return {**asdict(report), "s_per_mutant": report.s_per_mutant, "s_per_task": report.s_per_task}
