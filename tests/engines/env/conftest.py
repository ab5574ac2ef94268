"""Fixtures of the environment tests: small sandbox limits, micro tasks (one small real corpus: tests/conftest.py)."""

from __future__ import annotations

import pytest

from engines.env.config import EnvConfig, SandboxLimits
from engines.env.task_sources.micro import generate_micro_tasks
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
