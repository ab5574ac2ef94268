"""Fixtures of the environment tests: small sandbox limits, micro tasks, one small real corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.env.config import EnvConfig, SandboxLimits
from engines.env.micro import generate_micro_tasks
from engines.env.types import Task

# Small limits keep the security battery fast: 5 s wall, 3 s CPU, 256 MiB, 48 processes.
FAST_LIMITS = SandboxLimits(
    memory_mb=256, max_processes=48, cpu_seconds=3, file_size_mb=8, wall_timeout_s=5.0, output_bytes=64_000
)


@pytest.fixture(scope="session")
def env_config(tmp_path_factory: pytest.TempPathFactory) -> EnvConfig:
    return EnvConfig(limits=FAST_LIMITS, workers=2, scratch_dir=str(tmp_path_factory.mktemp("env-scratch")))


@pytest.fixture(scope="session")
def micro_tasks() -> list[Task]:
    return generate_micro_tasks(24, seed=7)


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few validated tasks of one small real project (sdist downloaded once, then cached)."""
    from engines.env.builder import BuildConfig, build_corpus
    from engines.env.corpus import save_corpus

    out = tmp_path_factory.mktemp("real-corpus")
    config = BuildConfig(
        projects=["tinydb"],
        tasks_per_project=3,
        max_mutants_per_project=24,
        baseline_runs=2,
        env=EnvConfig(workers=2, scratch_dir=str(out / "scratch")),
    )
    tasks, reports = build_corpus(config, out)
    save_corpus(tasks, out)
    return out
