"""A pool of vLLM servers: one object that starts them, routes to them and updates their weights.

The concerns live in their own modules; this one puts them together and holds the
request path:
- server_fleet.py: the servers' lives (start or attach, stop) and recovery: a dead
  local server is restarted with the current weights loaded, at most `max_restarts`
  times, also when a weight update finds it dead (the update then goes on);
- routing.py: session affinity, else the least-loaded routable server;
- weight_reload.py / weight_restart.py: the two weight-update strategies (config
  `weight_update`), each checking every server against the exported weights
  (weight_check.py), with one server or many;
- server_slot.py: the plain data they share;
- disaggregation.py: with `cluster.disaggregation`, each request goes through a
  prefill server, then a decode server.
Here: at most `concurrency_per_server` requests in flight per server, more wait;
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
from engines.inference.routing import Router
from engines.inference.server_fleet import ServerFleet
from engines.inference.server_slot import ServedWeights, ServerSlot
from engines.inference.types import Completion, SamplingParams
from engines.inference.weight_check import WeightUpdateError, expected_digests, verify_same_weights
from engines.inference.weight_reload import ReloadUpdate
from engines.inference.weight_restart import RestartUpdate

__all__ = ["ServerPool", "ServerSlot", "WeightUpdateError"]

log = logging.getLogger(__name__)


class ServerPool:
    """Use as `async with ServerPool(cfg) as pool: ...`, or call start() / close()."""

    def __init__(self, cfg: InferenceConfig, version: int = 0) -> None:
        """`version`: the weight version of `cfg.model_dir` (a run resumed later starts above 0)."""
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
        self.served = ServedWeights(version)
        # Prefill/decode disaggregation: requests go through a prefill server first (disaggregation.py).
        shared_kv = disaggregation.shared_kv_path(cfg, self.log_dir)
        self.fleet = ServerFleet(cfg, self._http, self.served, self.log_dir, shared_kv)
        self.router = Router(self.fleet.slots)
        self._pd = (
            disaggregation.PrefillDecode(self.client, self.model_name, self.fleet.slots, self.fleet.recover, shared_kv)
            if cfg.cluster.disaggregation is not None
            else None
        )
        self.update_mode = "restart" if cfg.weight_update == "restart" else "reload"
        self._updater = RestartUpdate(self.fleet) if self.update_mode == "restart" else ReloadUpdate(self.fleet)
        self._update_lock = asyncio.Lock()
        if cfg.verify_checksums and not cfg.worker_extension:
            log.warning("worker_extension=false: weight updates are not checked against the exported weights")

    @property
    def slots(self) -> list[ServerSlot]:
        return self.fleet.slots

    @property
    def version(self) -> int:
        """The weight version the servers serve (or are being updated to)."""
        return self.served.version

    @property
    def weights_dir(self) -> str | None:
        """The last weights directory given to update_weights."""
        return self.served.weights_dir

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
        except BaseException:
            await self.close()
            raise

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
        (weight_reload.py or weight_restart.py), each server checked against the
        exported weights when `verify_checksums` (and, with two or more servers, against
        each other). Raises WeightUpdateError when a server fails or loaded other
        weights; that server is left out of routing until an update passes.
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
        checked = self.cfg.verify_checksums and self.cfg.worker_extension
        async with self._update_lock:
            expected = await asyncio.to_thread(expected_digests, path) if checked else None
            self.served.weights_dir = str(path.resolve())
            self.served.version = version  # restarts from now on load this version
            self.served.expected = expected
            await self._updater.apply(path.resolve())
            if self.cfg.verify_checksums and len(self.slots) > 1:
                await verify_same_weights(self._http, self.urls, self.cfg.request_timeout_s)
            if self._pd is not None:
                # KV computed with the old weights must not be injected into new requests.
                await asyncio.to_thread(self._pd.clear_shared_kv)
        elapsed = time.monotonic() - start
        log.info("weights version %d from %s loaded on %d server(s) in %.2f s", version, path, len(self.slots), elapsed)
        return elapsed
