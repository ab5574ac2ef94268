"""Make sure a Prefect API is there for the whole run.

With PREFECT_API_URL set, the run reports to that server. Without it, one local
`prefect server start` is launched for the run (loopback, a persistent
PREFECT_HOME under the cache, so the UI keeps its history), restarted on the same
port if it dies mid-run, and shared by every process of the run: the rollout lane and the trainer lane are separate processes,
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
import threading
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
    server = _SupervisedServer(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env,
        log,
        url,
    )
    # Stopped at interpreter exit: Prefect drains its log and event workers in its own
    # exit handlers, registered after this one and so run before it. A run killed by a
    # signal skips those handlers; then the kernel stops the server (exit_with_parent).
    atexit.register(server.stop)
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    try:
        try:
            _wait_healthy(url, server.proc, deadline_s, log)
        except BaseException:
            server.stop()
            raise
        server.watch(deadline_s)
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


class _SupervisedServer:
    """The embedded server's process, restarted on the same port and database when it
    dies during the run: the lanes' Prefect clients retry refused connections with a
    backoff (2 s, 4 s, ... about a minute in all), so they carry on once it is back."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, url: str) -> None:
        self.argv, self.env, self.log, self.url = argv, env, log, url
        self.restarts = 0
        # Restarts come from a thread that flows/cores_apart.py may have confined to the
        # generation cores; the server keeps the cores it first started with, or a restart
        # beside a busy engine outlasts the lanes' client retries.
        self.cores = os.sched_getaffinity(0)
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        with open(self.log, "ab") as out:
            return subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=functools.partial(_server_child, os.getpid(), self.cores),
            )

    def watch(self, deadline_s: float) -> None:
        self._watcher = threading.Thread(
            target=self._supervise, args=(deadline_s,), name="prefect-server-watch", daemon=True
        )
        self._watcher.start()

    def _supervise(self, deadline_s: float) -> None:
        while not self._stopping.wait(0.5):
            code = self.proc.poll()
            if code is None:
                continue
            self.restarts += 1
            died = time.monotonic()
            print(f"[tandem] the Prefect server exited with code {code}; restarting it ({self.restarts})", flush=True)
            self.proc = self._start()
            try:
                _wait_healthy(self.url, self.proc, deadline_s, self.log)
            except (RuntimeError, TimeoutError) as exc:
                print(f"[tandem] the Prefect server did not come back ({exc}); trying again", flush=True)
                continue
            print(
                f"[tandem] the Prefect server is back at {self.url} after {time.monotonic() - died:.1f} s", flush=True
            )

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        _stop(self.proc)


def _server_child(parent: int, cores: set[int]) -> None:  # runs in the child before exec
    os.sched_setaffinity(0, cores)
    exit_with_parent(parent)


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
