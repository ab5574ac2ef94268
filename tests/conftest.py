"""Fixtures shared across the suite: a tiny MoE checkpoint and a real S3 server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import module_seconds
from tests.prefect_server import prefect_server  # noqa: F401 (the fixture, for every test folder)
from tests.tiny_model import make_tiny_model_dir

# Host requirements of markers (sandbox, cgroup, tmpfs) fail the run when missing;
# a process that outlives the test or fixture that started it fails that test.
pytest_plugins = ["tests.host_requirements", "tests.leftovers"]

# Keep every test process polite on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Nothing is downloaded at test time: a Hugging Face id resolves through the cache only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


# A test that needs a vLLM or Prefect server waits about a minute on 2 cores for the
# server to start, so it is never part of the fast inner loop (`-m "not slow"`).
SERVER_MARKERS = ("vllm", "prefect")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(m) for m in SERVER_MARKERS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    # Costliest modules first (tests/module_seconds.py), so the test processes finish together.
    module_seconds.costliest_first(items, slow=lambda item: item.get_closest_marker("slow") is not None)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny Qwen3-MoE with a tokenizer trained on code-like text."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-moe"))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, str]]:
    """moto's S3 server on loopback (a real HTTP S3 endpoint, not a mock of s3fs).

    Yields the environment a client needs; sets it in os.environ for the session.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with pytest.MonkeyPatch.context() as patch:  # the session's environment is restored after
        for key, value in env.items():
            patch.setenv(key, value)
        try:
            yield env
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: dict[str, str], request: pytest.FixtureRequest) -> str:
    """A fresh bucket per test (created with boto3: s3fs mkdir fails on moto in us-east-1)."""
    import boto3

    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-[]")
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name)
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few validated tasks of one small real project (sdist downloaded once, then cached)."""
    from engines.env.config import EnvConfig
    from engines.env.task_sources.builder import BuildConfig, build_corpus
    from engines.env.task_sources.corpus import save_corpus

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
