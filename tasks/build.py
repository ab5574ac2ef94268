"""Prefect task that builds one project's tasks (a coarse unit: a whole sdist)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from engines.env.builder import BuildConfig, build_corpus
from engines.env.sources import project_source


@task(name="build-project", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10)
def build_project(config: BuildConfig, project: str, out_dir: str) -> dict:
    """Build `project` into `out_dir/<project>`; returns its report as a small dict."""
    name = project_source(project).name
    _, reports = build_corpus(config.model_copy(update={"projects": [project]}), Path(out_dir) / name)
    return asdict(reports[0])
