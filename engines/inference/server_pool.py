"""A pool of vLLM servers: start or attach, route, recover, update weights.

Owns:
- the servers' lives: N local servers (each its own process group) or given URLs;
  every process started is stopped on `close()`, also when start-up fails half-way;
- routing: the turns of one session (episode) go to the same server so they reuse
  its prefix cache; a new session goes to the least-loaded healthy server; at most
  `concurrency_per_server` requests are in flight per server, more wait here;
  requests in flight to one server with the same sampling may share one HTTP
  request (`batching.py`);
- recovery: a request whose server stopped answering is re-sent (to another healthy
  server, or to the same one once restarted); a dead local server is restarted, with
  the current weights loaded, at most `max_restarts` times, also when it is found
  dead by a weight update (before or during it): the update then goes on;
- weight updates, one of two ways (config `weight_update`):
  reload (default): pause (keeping in-flight requests) -> reload (through our worker
  extension, exact for the CPU build's MoE experts too) -> verify -> resume, resume
  in `finally`, on every server at once;
  restart: one server at a time, route new requests elsewhere (or hold them), let its
  in-flight requests finish on the old weights, restart it on the new ones, verify;
  the version is recorded per server and each completion carries the version its
  server had when the request was sent.

Invariant: a request either returns a completion or raises; it is never dropped.
Does not know about episodes (`agent.py`) or the request format (`client.py`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from engines.inference import disaggregation, launch, routes
from engines.inference.batching import RequestCoalescer
from engines.inference.client import CompletionClient, ServerUnavailable
from engines.inference.config import InferenceConfig
from engines.inference.server_process import LocalServer, ServerStartError, free_port
from engines.inference.types import Completion, SamplingParams
from engines.inference.weight_dirs import reload_dir, serving_dir

log = logging.getLogger(__name__)


class WeightUpdateError(RuntimeError):
    """A weight update failed or could not be verified on some server."""


@dataclass(eq=False)
class ServerSlot:
    """One server as the pool sees it."""

    index: int
    url: str
    semaphore: asyncio.Semaphore
    process: LocalServer | None = None  # None for servers given by URL
    version: int = 0  # weight version currently loaded
    load: int = 0  # requests waiting for or holding this server's semaphore
    healthy: bool = True
    restarts: int = 0
    recovering: asyncio.Task[None] | None = field(default=None, repr=False)
    role: disaggregation.KvRole | None = None  # prefill (kv_producer) or decode (kv_consumer) server, or both


class ServerPool:
    """Use as `async with ServerPool(cfg) as pool: ...`, or call start() / close()."""

    def __init__(self, cfg: InferenceConfig, version: int = 0) -> None:
        """`version`: the weight version of `cfg.model_dir` (a run resumed later starts above 0)."""
        self.cfg = cfg
        self.slots: list[ServerSlot] = []
        self.version = version
        self.weights_dir: str | None = None  # last weights published to update_weights
        self._reload_from: str | None = None  # what the servers reload for it (reload_dir.py)
        self.model_name = cfg.served_model_name
        self.log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(tempfile.mkdtemp(prefix="vllm-logs-"))
        self._affinity: dict[str, ServerSlot] = {}
        self._update_lock = asyncio.Lock()
        self._cpu_build = False
        self._restart_updates = cfg.weight_update == "restart"
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(cfg.request_timeout_s, connect=cfg.connect_timeout_s),
            # vLLM closes idle connections after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), httpx's default expiry is also
            # 5 s: a request on a connection the server is closing fails with ReadError. Expire ours first.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=2.0),
        )
        self.client = CompletionClient(self._http, self.model_name, cfg.request_timeout_s, retries=cfg.max_retries)
        # retries=0: the pool re-sends failed requests itself, on a healthy server.
        self.batcher = RequestCoalescer(
            self.client, cfg.coalesce_window_ms / 1000, cfg.concurrency_per_server, retries=0
        )
        # Prefill/decode disaggregation: requests go through a prefill server first (disaggregation.py).
        self._pd = disaggregation.PrefillDecode(self) if cfg.cluster.disaggregation is not None else None

    # ---- life -------------------------------------------------------------------

    async def __aenter__(self) -> ServerPool:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the local servers and wait until all are healthy, or attach to URLs."""
        try:
            if self.cfg.local:
                await self._start_local()
            else:
                await self._attach()
        except BaseException:
            await self.close()
            raise

    async def _start_local(self) -> None:
        self.cfg.check_model_dir()
        python = launch.vllm_python()
        self._cpu_build = launch.is_cpu_build(python)
        launch.check_supported(self.cfg, self._cpu_build)
        kv_path = self._pd.shared_kv if self._pd is not None else None
        for i, role in enumerate(disaggregation.server_roles(self.cfg)):
            env = launch.server_environment(self.cfg, self._cpu_build, i)
            port = self.cfg.base_port + i if self.cfg.base_port else free_port(self.cfg.host)
            url = f"http://{self.cfg.host}:{port}"
            argv = launch.server_command(self.cfg, python, port, self._cpu_build, role, kv_path)
            server = LocalServer(argv, env, url, self.log_dir / f"server-{i}.log")
            self.slots.append(
                ServerSlot(
                    i,
                    url,
                    asyncio.Semaphore(self.cfg.concurrency_per_server),
                    process=server,
                    version=self.version,
                    role=role,
                )
            )
            server.start()
        waited = await asyncio.gather(
            *(s.process.wait_healthy(self.cfg.startup_timeout_s) for s in self.slots if s.process)
        )
        log.info("started %d vLLM server(s) in %.1f s (logs in %s)", len(self.slots), max(waited), self.log_dir)

    async def _attach(self) -> None:
        for i, url in enumerate(self.cfg.server_urls):
            url = url.rstrip("/")
            if not await routes.health(self._http, url):
                raise ServerUnavailable(f"server {url} (server_urls[{i}]) does not answer GET /health; is it running?")
            models = await routes.served_models(self._http, url)
            if self.model_name not in models:
                raise ValueError(
                    f"server {url} serves {models}, not served_model_name={self.model_name!r}; set served_model_name"
                )
            self.slots.append(
                ServerSlot(i, url, asyncio.Semaphore(self.cfg.concurrency_per_server), version=self.version)
            )

    async def close(self) -> None:
        """Stop every process this pool started and close connections. Safe to call twice."""
        for slot in self.slots:
            if slot.recovering is not None and not slot.recovering.done():
                slot.recovering.cancel()
        await self.batcher.close()
        stops = [asyncio.to_thread(s.process.stop) for s in self.slots if s.process is not None]
        await asyncio.gather(*stops, return_exceptions=True)
        await self._http.aclose()

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.slots]

    # ---- routing ----------------------------------------------------------------

    def _pick(self, session_id: str | None) -> ServerSlot | None:
        slot = self._affinity.get(session_id) if session_id is not None else None
        if slot is None or not slot.healthy:
            healthy = [s for s in self.slots if s.healthy and s.role != "kv_producer"]  # prefill: disaggregation.py
            if not healthy:
                return None
            slot = min(healthy, key=lambda s: s.load)
            if session_id is not None:
                self._affinity[session_id] = slot
        return slot

    def release_session(self, session_id: str) -> None:
        """Forget a finished session's server (keeps the affinity table small)."""
        self._affinity.pop(session_id, None)

    def server_of(self, session_id: str) -> str | None:
        slot = self._affinity.get(session_id)
        return slot.url if slot else None

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        session_id: str | None = None,
        routed_experts_start: int | None = None,
    ) -> Completion:
        """Sample a continuation on a server of the pool, re-sending it when its server
        fails; raises ServerUnavailable after `max_retries` re-sends."""
        errors: list[str] = []
        for _ in range(1 + self.cfg.max_retries):
            slot = self._pick(session_id)
            if slot is None:
                await self._wait_for_recovery()
                slot = self._pick(session_id)
                if slot is None:
                    errors.append("no healthy server")
                    continue
            slot.load += 1
            try:
                async with slot.semaphore:
                    if self._pd is not None:
                        return await self._pd.complete(slot, prompt_ids, params, routed_experts_start, session_id)
                    return await self.batcher.complete(
                        slot.url, prompt_ids, params, slot.version, routed_experts_start, session_id
                    )
            except ServerUnavailable as err:
                errors.append(str(err))
                self._recover(slot)
            finally:
                slot.load -= 1
        raise ServerUnavailable(f"request failed on every try ({len(errors)}): " + " | ".join(errors))

    # ---- recovery ---------------------------------------------------------------

    def recover(self, slot: ServerSlot) -> None:
        """Take `slot` out of routing and check / restart it in the background (once)."""
        self._recover(slot)

    def _recover(self, slot: ServerSlot) -> None:
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
                while not await routes.health(self._http, slot.url):
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
        assert slot.process is not None
        slot.restarts += 1
        log.warning("server %s died; restart %d/%d", slot.url, slot.restarts, self.cfg.max_restarts)
        await asyncio.to_thread(slot.process.stop)
        slot.process.start()
        try:
            await slot.process.wait_healthy(self.cfg.startup_timeout_s)
        except ServerStartError:
            log.exception("restart of server %s failed", slot.url)
            return
        if self._reload_from is not None and not self._restart_updates:  # started from model_dir: bring it up to date
            await routes.reload_weights(
                self._http, slot.url, self._reload_from, self.cfg.request_timeout_s, self.cfg.worker_extension
            )
        await routes.set_weight_version(self._http, slot.url, self.version)
        slot.version = self.version
        slot.healthy = True

    async def _wait_for_recovery(self) -> None:
        pending = [s.recovering for s in self.slots if s.recovering is not None and not s.recovering.done()]
        if pending:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    # ---- weight updates ---------------------------------------------------------

    async def update_weights(self, weights_dir: str, version: int) -> float:
        """Load the weights the trainer published as `version` into every server.

        reload: per server, pause (in-flight requests kept), reload from `weights_dir`,
        set and check the version, drop the prefix cache, resume (always).
        restart: per server in turn, drain, restart on `weights_dir`, set the version.
        Then, with `verify_checksums`, all servers must report identical weights.
        Returns the seconds the update took.
        """
        path = Path(weights_dir)
        if not path.is_dir() or not any(path.glob("*.safetensors")):
            raise FileNotFoundError(
                f"weights_dir {path}: no *.safetensors files; the trainer must publish a safetensors directory"
            )
        if version < self.version:
            raise ValueError(f"weight version {version} is older than the served version {self.version}")
        start = time.monotonic()
        async with self._update_lock:
            self.weights_dir = str(path.resolve())
            self.version = version  # restarts from now on load this version
            if self._restart_updates:
                await self._restart_all(path.resolve())
            else:
                await self._reload_all(path.resolve())
            if self.cfg.verify_checksums and len(self.slots) > 1:
                await self._verify_same_weights()
            if self._pd is not None:
                await asyncio.to_thread(self._pd.clear_shared_kv)
        elapsed = time.monotonic() - start
        log.info("weights version %d from %s loaded on %d server(s) in %.2f s", version, path, len(self.slots), elapsed)
        return elapsed

    async def _reload_all(self, path: Path) -> None:
        staging = self.log_dir if self.cfg.local else None  # attached servers must see it: beside the weights
        self._reload_from = str(await asyncio.to_thread(reload_dir, path, Path(self.cfg.model_dir), staging))
        # A crash restart in flight ends first (then it is updated below like the others).
        await self._settle_recoveries()
        updating = [s for s in self.slots if s.healthy]
        results = await asyncio.gather(*(self._update_server(s) for s in updating), return_exceptions=True)
        failures = []
        for slot, result in zip(updating, results):
            if isinstance(result, BaseException) and not await self._restarted_after_death(slot):
                failures.append(f"{slot.url}: {type(result).__name__}: {result}")
        if failures:
            raise WeightUpdateError(f"weight update to version {self.version} failed: " + " | ".join(failures))

    async def _settle_recoveries(self) -> None:
        pending = [s.recovering for s in self.slots if s.recovering is not None and not s.recovering.done()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _restarted_after_death(self, slot: ServerSlot) -> bool:
        """A local server that died before or during an update is restarted; its restart
        reloads `_reload_from`, the weights being loaded. True when it is back on them."""
        if slot.process is None:
            return False
        for _ in range(20):  # a server that is dying may break its connection before it is gone
            if not slot.process.alive():
                break
            await asyncio.sleep(0.1)
        else:
            return False  # alive and failing: a real update error
        self._recover(slot)
        if slot.recovering is not None:
            await slot.recovering
        return slot.healthy and slot.version == self.version

    async def _restart_all(self, path: Path) -> None:
        model = await asyncio.to_thread(serving_dir, path, Path(self.cfg.model_dir), self.log_dir, self.version)
        for slot in self.slots:  # any restart from now on, crash or update, starts the new weights
            assert slot.process is not None
            slot.process.set_model(str(model))
        for slot in self.slots:  # one at a time: the others keep serving
            assert slot.process is not None
            if slot.recovering is not None and not slot.recovering.done():
                await slot.recovering  # a crash restart in progress; it started the old weights
            slot.recovering = asyncio.create_task(self._drain_and_restart(slot))
            await slot.recovering
            if not slot.healthy:
                raise WeightUpdateError(
                    f"server {slot.url} did not come back on version {self.version}; log {slot.process.log_path}"
                )

    async def _drain_and_restart(self, slot: ServerSlot) -> None:
        assert slot.process is not None
        slot.healthy = False  # new requests go to other servers, or wait for this one
        deadline = time.monotonic() + self.cfg.request_timeout_s
        while slot.load > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # in-flight requests finish on the old weights
        await asyncio.to_thread(slot.process.stop)
        slot.process.start()
        try:
            await slot.process.wait_healthy(self.cfg.startup_timeout_s)
        except ServerStartError:
            log.exception("server %s failed to start on version %d", slot.url, self.version)
            return
        await routes.set_weight_version(self._http, slot.url, self.version)
        slot.version = self.version
        slot.healthy = True

    async def _update_server(self, slot: ServerSlot) -> None:
        assert self._reload_from is not None
        await routes.pause(self._http, slot.url)
        try:
            await routes.reload_weights(
                self._http, slot.url, self._reload_from, self.cfg.request_timeout_s, self.cfg.worker_extension
            )
            await routes.set_weight_version(self._http, slot.url, self.version)
            served = await routes.weight_version(self._http, slot.url)
            if served != str(self.version):
                raise WeightUpdateError(f"server {slot.url} reports weight version {served}, expected {self.version}")
            slot.version = self.version
            # Cached prefixes hold KV from the old weights; False while frozen requests hold blocks.
            if not await routes.reset_prefix_cache(self._http, slot.url):
                log.info("server %s kept its prefix cache (in-flight requests hold blocks)", slot.url)
        finally:
            await routes.resume(self._http, slot.url)

    async def _verify_same_weights(self) -> None:
        sums = await asyncio.gather(
            *(routes.weight_checksums(self._http, s.url, self.cfg.request_timeout_s) for s in self.slots)
        )
        reference = sums[0]
        for slot, other in zip(self.slots[1:], sums[1:]):
            if other != reference:
                differ = sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))
                raise WeightUpdateError(
                    f"server {slot.url} weights differ from {self.slots[0].url} after the update: {differ[:5]}"
                )
