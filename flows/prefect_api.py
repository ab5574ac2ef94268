"""Make sure a Prefect API is there for the whole run.

With PREFECT_API_URL set, the run reports to that server. Without it, one local
`prefect server start` is launched for the run (loopback, a persistent
PREFECT_HOME under the cache, so the UI keeps its history) and shared by every
process of the run: the rollout lane and the trainer lane are separate processes,
and Prefect's per-process temporary server would split them into two databases.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from prefect.settings import PREFECT_API_URL, temporary_settings

from engines.lifetime import exit_with_parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, deadline_s: float, log: Path) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"prefect server at {url} not healthy after {deadline_s:.0f} s; see {log}")


@contextlib.contextmanager
def prefect_api(home: str | Path | None = None, deadline_s: float = 90.0) -> Iterator[str]:
    """Yield the API URL in use; start a local server if none is set (stopped at exit)."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    home = Path(home or Path.home() / ".cache" / "tandem-rl" / "prefect")
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_API_HOST": "127.0.0.1",
        "PREFECT_SERVER_API_PORT": str(port),  # the UI points at 4200 without it
        "PREFECT_UI_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Slot leases on disk, not in the server's memory: after a run killed together
        # with its server, the next server still expires the dead lanes' leases and
        # frees their slots (in memory they would be lost and the slots taken forever).
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
    }
    log = home / "server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=functools.partial(exit_with_parent, os.getpid()),
        )
    # Stopped at interpreter exit: Prefect drains its log and event workers in its own
    # exit handlers, registered after this one and so run before it. A run killed by a
    # signal skips those handlers; then the kernel stops the server (exit_with_parent).
    atexit.register(_stop, proc)
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    try:
        try:
            _wait_healthy(url, proc, deadline_s, log)
        except BaseException:
            _stop(proc)
            raise
        # Child processes (the trainer lane) read the environment; this process's
        # Prefect settings were loaded at import, so they are overridden in place.
        os.environ["PREFECT_API_URL"] = url
        os.environ["PREFECT_HOME"] = str(home)
        print(f"[tandem] Prefect UI: http://127.0.0.1:{port}  (server log: {log})", flush=True)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _stop(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGINT first (Prefect shuts down cleanly on it), then kill the process group."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
