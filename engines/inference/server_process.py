"""The life of one local vLLM server process.

Owns: starting the process in its own process group (so its engine workers die with
it), polling /health with a deadline that also notices an early exit, and stopping
it (SIGTERM to the group, then SIGKILL after a grace period). Does not route
requests (`server_pool.py`), restart crashed servers (`server_fleet.py`) or update
weights (`weight_update.py`). `ServerSlot` is one server as the pool sees it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from engines.lifetime import exit_with_parent, stop_group

if TYPE_CHECKING:
    from engines.inference.types import KvRole


class ServerStartError(RuntimeError):
    """A local server exited or stayed unhealthy past its deadline."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def reachable_host(bind: str) -> str:
    """The name other machines reach a server listening on `bind` by: this machine's
    host name for a wildcard address, else the address itself."""
    return socket.gethostname() if bind in ("0.0.0.0", "::", "") else bind


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalServer:
    """One vLLM server process started from an argv, logging to `log_path`."""

    def __init__(self, argv: list[str], env: dict[str, str], url: str, log_path: Path) -> None:
        self.argv = argv
        self.env = env
        self.url = url
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def set_model(self, model_dir: str) -> None:
        """Serve `model_dir` from the next start on (same served model name)."""
        self.argv[self.argv.index("--model") + 1] = model_dir

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # start_new_session: own process group, so stop() reaches the engine workers too;
            # exit_with_parent: a killed run leaves no server behind.
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=functools.partial(exit_with_parent, os.getpid()),
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def move_to(self, port: int) -> None:
        """Listen on `port` (and be reached there) from the next start on."""
        self.argv[self.argv.index("--port") + 1] = str(port)
        self.url = f"{self.url.rsplit(':', 1)[0]}:{port}"

    def lost_its_port(self) -> bool:
        """Whether the process exited because another one bound its port first."""
        return self.process is not None and not self.alive() and "Address already in use" in log_tail(self.log_path, 5)

    async def wait_started(self, timeout_s: float, new_port: Callable[[], int] | None = None, tries: int = 3) -> float:
        """wait_healthy; a server that lost its port (a free port can be taken by another
        process between `free_port` and the server's bind) is started again on `new_port()`,
        `tries` starts in all. Without `new_port` (a fixed port) it is not moved."""
        for attempt in range(1, tries + 1):
            try:
                return await self.wait_healthy(timeout_s)
            except ServerStartError:
                if new_port is None or attempt == tries or not self.lost_its_port():
                    raise
            self.move_to(new_port())
            self.start()
        raise AssertionError("unreachable")

    async def wait_healthy(self, timeout_s: float) -> float:
        """Poll /health until it answers 200; returns seconds waited. Raises
        ServerStartError, with the log's tail, when the process exits or the deadline passes."""
        start = time.monotonic()
        async with httpx.AsyncClient(timeout=5.0) as http:
            while True:
                if not self.alive():
                    code = self.process.returncode if self.process else None
                    raise ServerStartError(
                        f"vLLM server {self.url} exited with code {code} while starting; log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                try:
                    if (await http.get(f"{self.url}/health")).status_code == 200:
                        return time.monotonic() - start
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() - start > timeout_s:
                    self.stop()
                    raise ServerStartError(
                        f"vLLM server {self.url} not healthy after {timeout_s:.0f} s; log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                await asyncio.sleep(0.5)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s` seconds."""
        if self.process is not None:
            stop_group(self.process, grace_s)

    def kill(self) -> None:
        """SIGKILL the whole group at once (tests of crash recovery)."""
        if self.process is not None:
            stop_group(self.process, 0, signal.SIGKILL)


# ---- one server as the pool sees it ------------------------------------------
# Plain data: what the pool, the fleet and the weight updater know of one server.


@dataclass(eq=False)
class ServerSlot:
    """One server as the pool sees it."""

    index: int
    url: str
    semaphore: asyncio.Semaphore
    process: LocalServer | None = None  # None for servers given by URL
    version: int = 0  # weight version currently loaded
    load: int = 0  # requests waiting for or holding this server's semaphore
    healthy: bool = True  # answering; False while it is checked or restarted
    verified: bool = True  # False once its loaded weights failed the check, until an update passes it
    restarts: int = 0
    recovering: asyncio.Task[None] | None = field(default=None, repr=False)
    role: KvRole | None = None  # prefill (kv_producer) or decode (kv_consumer) server; None: both
    host: int = 0  # the machine it runs on (inference.hosts): 0 is the pool's own

    @property
    def routable(self) -> bool:
        return self.healthy and self.verified
