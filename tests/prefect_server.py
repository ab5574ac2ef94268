"""A real Prefect server on loopback with a temporary PREFECT_HOME, one per test process
(the `prefect_server` fixture, registered by tests/conftest.py for flow and task tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Yields the environment that points a process at the server."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
        # Services no test uses, off: they poll the database on a loop or read every event
        # (the server took 8.4 CPU-s with them off, 11-13 with them on, over 40 s of a
        # 200-task flow and three polling workers). Kept: the task-run recorder, the
        # lease repossessor (tests/flows/test_parent_watch.py), cancellation clean-up.
        **{
            f"PREFECT_SERVER_SERVICES_{service}_ENABLED": "false"
            for service in ("SCHEDULER", "LATE_RUNS", "PAUSE_EXPIRATIONS", "FOREMAN", "TRIGGERS", "EVENT_PERSISTER")
        },
    }
    log = open(Path(home) / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # A busy 2-core machine (other test processes, vLLM) has taken over 2 minutes to start it.
    deadline = time.monotonic() + 300
    try:
        while True:
            assert proc.poll() is None, f"prefect server exited; see {log.name}"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "prefect server not healthy after 300 s"
            time.sleep(0.5)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # not left running after a failed start
        raise
    try:
        yield {
            k: env[k]
            for k in (
                "PREFECT_HOME",
                "PREFECT_API_URL",
                "PREFECT_WORKER_QUERY_SECONDS",
                "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW",
            )
        }
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
