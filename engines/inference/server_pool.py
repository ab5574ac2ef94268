"""A pool of vLLM servers: one object that starts them, routes to them and updates their weights.

The concerns live in their own modules; this one puts them together and holds the
request path:
- server_fleet.py: the servers' lives (start or attach, stop) and recovery: a dead
  local server is restarted with the current weights loaded, at most `max_restarts`
  times, also when a weight update finds it dead (the update then goes on);
- weight_update.py: the served weights and both update strategies (config
  `weight_update`), each checking every server against the exported weights
  (weight_files.py), with one server or many;
- server_process.py: one server's process, and the slot the pool keeps for it;
- disaggregation.py: with `cluster.disaggregation`, each request goes through a
  prefill server, then a decode server.
Here: routing (session affinity, else the least-loaded routable server), at most `concurrency_per_server` requests in flight per server, more wait;
requests in flight to one server with the same sampling may share one HTTP request
(`batching.py`); a request whose server stopped answering is re-sent (to another
healthy server, or to the same one once restarted).

Invariant: a request either returns a completion or raises; it is never dropped.
Does not know about episodes (`agent.py`) or the request format (`client.py`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from engines.inference import disaggregation
from engines.inference.batching import RequestCoalescer
from engines.inference.client import CompletionClient, ServerUnavailable
from engines.inference.config import InferenceConfig
from engines.inference.remote_hosts import RemoteHosts
from engines.inference.server_fleet import ServerFleet
from engines.inference.server_process import ServerSlot
from engines.inference.types import Completion, SamplingParams
from engines.inference.weight_files import WeightUpdateError
from engines.inference.weight_update import WeightUpdater

__all__ = ["ServerPool", "ServerSlot", "WeightUpdateError"]

log = logging.getLogger(__name__)


class ServerPool:
    """Use as `async with ServerPool(cfg) as pool: ...`, or call start() / close()."""

    def __init__(self, cfg: InferenceConfig, version: int = 0, remote: RemoteHosts | None = None) -> None:
        """`version`: the weight version of `cfg.model_dir` (a run resumed later starts above 0).
        `remote`: the other machines' servers, with `cfg.hosts` > 1 (remote_hosts.py)."""
        if cfg.hosts > 1 and remote is None:
            raise ValueError(f"inference.hosts = {cfg.hosts}: the pool needs the other hosts' reports (RemoteHosts)")
        self.remote = remote
        self.cfg = cfg
        self.model_name = cfg.served_model_name
        self.log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(tempfile.mkdtemp(prefix="vllm-logs-"))
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
        shared_kv = disaggregation.shared_kv_path(cfg, self.log_dir)
        self.fleet = ServerFleet(cfg, self._http, version, self.log_dir, shared_kv)
        self.weights = WeightUpdater(self.fleet, self._http, version, remote)
        self.router = Router(self.fleet.slots)
        self._pd = (
            disaggregation.PrefillDecode(self.client, self.model_name, self.fleet.slots, self.fleet.recover, shared_kv)
            if cfg.cluster.disaggregation is not None
            else None
        )
        self._update_lock = asyncio.Lock()
        if cfg.verify_checksums and not cfg.worker_extension:
            log.warning("worker_extension=false: weight updates are not checked against the exported weights")

    @property
    def slots(self) -> list[ServerSlot]:
        return self.fleet.slots

    @property
    def version(self) -> int:
        """The weight version the servers serve (or are being updated to)."""
        return self.weights.served.version

    @property
    def weights_dir(self) -> str | None:
        """The last weights directory given to update_weights."""
        return self.weights.served.weights_dir

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.slots]

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
                await self.fleet.start_local()
            else:
                await self.fleet.attach(self.model_name)
            if self.remote is not None and self.cfg.hosts > 1:
                await self._attach_hosts(self.remote)
        except BaseException:
            await self.close()
            raise

    async def _attach_hosts(self, remote: RemoteHosts) -> None:
        """Route to the other hosts' servers too, each on this pool's weight version."""
        for host in range(1, self.cfg.hosts):
            urls = await remote.server_urls(host)
            await self.fleet.attach_host(host, urls)
            log.info("host %d: %d server(s) attached (%s)", host, len(urls), ", ".join(urls))
        await self.weights.align_remote()

    async def close(self) -> None:
        """Stop every process this pool started and close connections. Safe to call twice."""
        await self.batcher.close()
        await self.fleet.stop()
        await self._http.aclose()

    # ---- requests ---------------------------------------------------------------

    def release_session(self, session_id: str) -> None:
        """Forget a finished session's server (keeps the affinity table small)."""
        self.router.release(session_id)

    def server_of(self, session_id: str) -> str | None:
        return self.router.server_of(session_id)

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
            slot = self.router.pick(session_id)
            if slot is None:
                await self.fleet.wait_for_recovery()
                slot = self.router.pick(session_id)
                if slot is None:
                    errors.append("no healthy server with verified weights")
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
                self.fleet.recover(slot)
            finally:
                slot.load -= 1
        raise ServerUnavailable(f"request failed on every try ({len(errors)}): " + " | ".join(errors))

    def recover(self, slot: ServerSlot) -> None:
        """Take `slot` out of routing and check / restart it in the background (once)."""
        self.fleet.recover(slot)

    # ---- weight updates ---------------------------------------------------------

    async def update_weights(self, weights_dir: str, version: int) -> float:
        """Load the weights the trainer published as `version` into every server
        (weight_update.py), each server checked against the
        exported weights when `verify_checksums` (and, with two or more servers, against
        each other). Raises WeightUpdateError when a server fails or loaded other
        weights; that server is left out of routing until an update passes.
        Returns the seconds the update took.
        """
        start = time.monotonic()
        async with self._update_lock:
            await self.weights.update(weights_dir, version)
            if self._pd is not None:
                # KV computed with the old weights must not be injected into new requests.
                await asyncio.to_thread(self._pd.clear_shared_kv)
        elapsed = time.monotonic() - start
        log.info(
            "weights version %d from %s loaded on %d server(s) in %.2f s",
            version,
            weights_dir,
            len(self.slots),
            elapsed,
        )
        return elapsed


# ---- routing -----------------------------------------------------------------
# Which server takes a request: session affinity, else the least-loaded routable server.
#
# The turns of one session (episode) go to the same server so they reuse its prefix
# cache; a new session, or one whose server left routing, goes to the least-loaded
# server that is healthy and holds verified weights.


class Router:
    """Routes over `slots`, a list the pool fills and shares (never copied here)."""

    def __init__(self, slots: list[ServerSlot]) -> None:
        self.slots = slots
        self._affinity: dict[str, ServerSlot] = {}

    def pick(self, session_id: str | None) -> ServerSlot | None:
        """The server for the next request of `session_id`; None when no server is routable."""
        slot = self._affinity.get(session_id) if session_id is not None else None
        if slot is None or not slot.routable:
            # Prefill servers are reached only through a decode request (disaggregation.py).
            routable = [s for s in self.slots if s.routable and s.role != "kv_producer"]
            if not routable:
                return None
            slot = min(routable, key=lambda s: s.load)
            if session_id is not None:
                self._affinity[session_id] = slot
        return slot

    def release(self, session_id: str) -> None:
        """Forget a finished session's server (keeps the affinity table small)."""
        self._affinity.pop(session_id, None)

    def server_of(self, session_id: str) -> str | None:
        slot = self._affinity.get(session_id)
        return slot.url if slot else None
