"""The servers' lives: start or attach, stop, and recovery after a crash.

Start: this machine's share of the servers (each its own process group) or given URLs,
and with `inference.hosts` > 1 the other hosts' servers, attached as their hosts report
them; every process started here is stopped by `stop()`, also when start-up fails
half-way. Another host's servers are its own to restart.
Recovery: a server whose request failed leaves routing and is checked in the
background (once at a time): healthy again once /health answers, or, when its
process died, restarted, at most `max_restarts` times, by `bring_up`: the weight
updater's restart onto the served weights, checked (weight_update.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from engines.inference import client, disaggregation, launch
from engines.inference.client import ServerUnavailable
from engines.inference.config import InferenceConfig
from engines.inference.server_process import LocalServer, ServerSlot, free_port, reachable_host
from engines.inference.types import KvRole
from engines.inference.weight_files import WeightUpdateError
from engines.settle import settle

log = logging.getLogger(__name__)


class ServerFleet:
    """The pool's servers (`slots`, filled in place) and what keeps them up."""

    def __init__(
        self,
        cfg: InferenceConfig,
        http: httpx.AsyncClient,
        version: int,
        log_dir: Path,
        shared_kv: str | None = None,
    ) -> None:
        """`shared_kv`: the folder prefill and decode servers exchange KV through (disaggregation.py)."""
        self.cfg = cfg
        self.shared_kv = shared_kv
        self.http = http
        self.version = version  # the weights servers start on (model_dir's)
        # Restarts a dead server onto the served weights; set by the weight updater.
        self.bring_up: Callable[[ServerSlot], Awaitable[None]] | None = None
        self.log_dir = log_dir
        self.slots: list[ServerSlot] = []

    # ---- start and stop ---------------------------------------------------------

    async def start_local(self, host: int = 0) -> None:
        """Start this machine's servers (host `host` of `inference.hosts`: its share of
        them, in order) and wait until all are healthy."""
        self.cfg.check_model_dir()
        python = launch.vllm_python()
        cpu_build = launch.is_cpu_build(python)
        launch.check_supported(self.cfg, cpu_build)
        roles = disaggregation.server_roles(self.cfg)
        # Host 0's servers are reached from this machine; another host's from the pool's.
        name = self.cfg.host if host == 0 else reachable_host(self.cfg.host)
        for i, index in enumerate(self.cfg.host_servers(host)):  # i: this machine's, index: the run's
            env = launch.server_environment(self.cfg, cpu_build, i)
            port = self.cfg.base_port + i if self.cfg.base_port else free_port(self.cfg.host)
            url = f"http://{name}:{port}"
            argv = launch.server_command(self.cfg, python, port, cpu_build, roles[index], self.shared_kv)
            server = LocalServer(argv, env, url, self.log_dir / f"server-{index}.log")
            self.slots.append(self._slot(index, url, server, roles[index], host))
            server.start()
        # A port free_port chose may be bound by another process first: such a server moves.
        new_port = None if self.cfg.base_port else functools.partial(free_port, self.cfg.host)
        local = [s for s in self.slots if s.process]
        waited = await asyncio.gather(*(s.process.wait_started(self.cfg.startup_timeout_s, new_port) for s in local))
        for slot in local:
            slot.url = slot.process.url
        log.info("started %d vLLM server(s) in %.1f s (logs in %s)", len(self.slots), max(waited), self.log_dir)

    async def attach(self, model_name: str) -> None:
        """Use the servers of `server_urls`, which must answer and serve `model_name`."""
        for i, url in enumerate(self.cfg.server_urls):
            url = url.rstrip("/")
            if not await client.health(self.http, url):
                raise ServerUnavailable(f"server {url} (server_urls[{i}]) does not answer GET /health; is it running?")
            models = await client.served_models(self.http, url)
            if model_name not in models:
                raise ValueError(
                    f"server {url} serves {models}, not served_model_name={model_name!r}; set served_model_name"
                )
            self.slots.append(self._slot(i, url, None))

    async def attach_host(self, host: int, urls: list[str]) -> None:
        """Route to the servers host `host` started (inference.hosts), which must answer."""
        roles = disaggregation.server_roles(self.cfg)
        indices = self.cfg.host_servers(host)
        if len(urls) != len(indices):
            raise ValueError(f"host {host} lists {len(urls)} server(s), but each host starts {len(indices)}")
        for index, url in zip(indices, urls):
            if not await client.health(self.http, url):
                raise ServerUnavailable(f"server {url} of host {host} does not answer GET /health")
            self.slots.append(self._slot(index, url, None, roles[index], host))

    def _slot(
        self, index: int, url: str, process: LocalServer | None, role: KvRole | None = None, host: int = 0
    ) -> ServerSlot:
        semaphore = asyncio.Semaphore(self.cfg.concurrency_per_server)
        return ServerSlot(index, url, semaphore, process=process, version=self.version, role=role, host=host)

    async def stop(self) -> None:
        """Cancel recoveries and stop every process started here. Safe to call twice."""
        for slot in self.slots:
            if slot.recovering is not None and not slot.recovering.done():
                slot.recovering.cancel()
        stops = [asyncio.to_thread(s.process.stop) for s in self.slots if s.process is not None]
        await settle(*stops)

    # ---- recovery ---------------------------------------------------------------

    def recover(self, slot: ServerSlot) -> None:
        """Take `slot` out of routing and check / restart it in the background (once)."""
        if slot.recovering is not None and not slot.recovering.done():
            return
        slot.healthy = False
        slot.recovering = asyncio.create_task(self._check_or_restart(slot))

    async def _check_or_restart(self, slot: ServerSlot) -> None:
        try:
            if slot.process is None or slot.process.alive():
                # A blip or a stuck server: healthy again once /health answers.
                deadline = time.monotonic() + self.cfg.startup_timeout_s
                while not await client.health(self.http, slot.url):
                    if slot.process is not None and not slot.process.alive():
                        break
                    if time.monotonic() > deadline:
                        log.error("server %s stayed unhealthy; left out of routing", slot.url)
                        return
                    await asyncio.sleep(1.0)
                else:
                    slot.healthy = True
                    return
            if slot.restarts >= self.cfg.max_restarts:
                log.error("server %s died again after %d restarts; left out of routing", slot.url, slot.restarts)
                return
            await self._restart(slot)
        except Exception:  # logged, never lost in an unawaited task
            log.exception("recovery of server %s failed", slot.url)

    async def _restart(self, slot: ServerSlot) -> None:
        assert slot.process is not None and self.bring_up is not None
        slot.restarts += 1
        log.warning("server %s died; restart %d/%d", slot.url, slot.restarts, self.cfg.max_restarts)
        try:
            await self.bring_up(slot)
        except WeightUpdateError:
            log.exception("server %s restarted on other weights than the served ones", slot.url)

    async def wait_for_recovery(self) -> None:
        """Until one recovery in progress ends (at once when none is)."""
        pending = self._pending()
        if pending:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    async def settle_recoveries(self) -> None:
        """Until every recovery in progress ends."""
        pending = self._pending()
        if pending:
            await settle(*pending)

    def _pending(self) -> list[asyncio.Task[None]]:
        return [s.recovering for s in self.slots if s.recovering is not None and not s.recovering.done()]
