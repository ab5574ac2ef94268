"""Live weight updates: the one owner of what every server should serve
(`ServedWeights`) and of the sequences that change it.

reload (`weight_update='reload'`, the default), on every server at once. First, while
every server still serves, this process digests the files the servers will reload from
and must find the export's digests (weight_files.py; a worker's own digest pass would
stall its engine, which runs it between generation steps): an update to other weights
is refused before any pause, every server still on its verified version. Then per
server: pause (in-flight requests kept) -> reload through our worker extension (exact
for the CPU build's MoE experts too) -> confirm each worker read the checked directory
(a path, not a digest pass; servers given by URL must see that folder's bytes, as they
must see it to reload at all) -> set and read back the version -> drop the prefix cache
-> resume, always. A server found
dead before or during the update is restarted on the new weights and counts as
updated once it is back on them and checked. A server of another host
(`inference.hosts`) reloads from that host's own copy, which the host checked against
the export before the pool waited for it (remote_hosts.py), and is checked the same way.

restart (`weight_update='restart'`, local servers only), one server at a time. Every
later start of any server, crash restarts too, uses the new weights. Per server in
turn: route new requests elsewhere (or hold them), let its in-flight requests finish
on the old weights, then `bring_up`. The others keep serving meanwhile; each
completion carries the version its server had when the request was sent.

`bring_up` is the one restart-and-verify sequence: stop, start, wait until healthy,
reload the served weights where the server starts from `model_dir`, check, set the
version. The fleet (server_fleet.py) calls it for a server that died. A server that
loaded other weights fails the update and is left out of routing until a later
update passes the check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engines.inference import client
from engines.inference.remote_hosts import RemoteHosts
from engines.inference.server_fleet import ServerFleet
from engines.inference.server_process import ServerSlot, ServerStartError
from engines.inference.weight_files import (
    WeightUpdateError,
    expected_digests,
    reload_dir,
    serving_dir,
    verify_files,
    verify_loaded,
    verify_loaded_from,
    verify_same_weights,
)
from engines.settle import settle

log = logging.getLogger(__name__)


@dataclass
class ServedWeights:
    """What every server should serve now; a server restarted after a crash is brought up to it."""

    version: int
    weights_dir: str | None = None  # last directory published to update_weights
    reload_from: str | None = None  # what servers reload for it (weight_files.reload_dir); None: model_dir
    expected: dict[str, str] | None = None  # tensor digests a server that loaded it must report; None: unchecked
    remote_from: dict[int, str] = field(default_factory=dict)  # other hosts' folders of this version (by host)


class WeightUpdater:
    """Updates the fleet's servers to published weights, and brings restarted ones up to them."""

    def __init__(
        self, fleet: ServerFleet, http: httpx.AsyncClient, version: int, remote: RemoteHosts | None = None
    ) -> None:
        """`remote`: where the servers of other hosts (inference.hosts) reload each version from."""
        self.fleet, self.cfg, self.http = fleet, fleet.cfg, http
        self.remote = remote
        self.served = ServedWeights(version)
        self.mode = "restart" if self.cfg.weight_update == "restart" else "reload"
        fleet.bring_up = self.bring_up

    async def update(self, weights_dir: str, version: int) -> None:
        """Load the weights published as `version` into every server, each checked against
        the export when `verify_checksums` (and, with two or more servers, against each
        other). Raises WeightUpdateError when a server fails or loaded other weights."""
        path = Path(weights_dir)
        if not path.is_dir() or not any(path.glob("*.safetensors")):
            raise FileNotFoundError(
                f"weights_dir {path}: no *.safetensors files; the trainer must publish a safetensors directory"
            )
        if version < self.served.version:
            raise ValueError(f"weight version {version} is older than the served version {self.served.version}")
        path = path.resolve()
        expected = await asyncio.to_thread(expected_digests, path) if self._checked else None
        reload_from = None
        if self.mode == "reload":
            staging = self.fleet.log_dir if self.cfg.local else None  # attached servers must see it: beside the weights
            reload_from = str(await asyncio.to_thread(reload_dir, path, Path(self.cfg.model_dir), staging))
            if expected is not None:  # refused here, every server still serving what it served
                await asyncio.to_thread(verify_files, reload_from, expected)
        # Each other host's copy, checked there against the export's digests, before any server pauses.
        remote_from = await self._remote_dirs(version)
        self.served.expected = expected
        self.served.weights_dir = str(path)
        self.served.version = version  # restarts from now on load this version
        self.served.remote_from = remote_from
        if reload_from is not None:
            self.served.reload_from = reload_from
        await (self._restart_all(path) if self.mode == "restart" else self._reload_all())
        slots = self.fleet.slots
        if self.cfg.verify_checksums and len(slots) > 1:
            await verify_same_weights(self.http, [s.url for s in slots], self.cfg.request_timeout_s)

    @property
    def _checked(self) -> bool:
        """Updates are checked against the export (which needs the worker extension)."""
        return self.cfg.verify_checksums and self.cfg.worker_extension

    async def _remote_dirs(self, version: int) -> dict[int, str]:
        """Host -> the folder its servers reload `version` from, for every other host."""
        hosts = sorted({s.host for s in self.fleet.slots if s.host != 0})
        if not hosts:
            return {}
        assert self.remote is not None, "servers of other hosts need a RemoteHosts"
        dirs = await asyncio.gather(*(self.remote.reload_from(h, version) for h in hosts))
        return dict(zip(hosts, dirs))

    async def align_remote(self) -> None:
        """Reload every other host's server that serves another version than the pool's
        (a host lane started before the pool, on an older or newer version), and resume
        one a pool that died mid-update left paused."""
        behind = []
        for slot in self.fleet.slots:
            if slot.host == 0:
                continue
            if await client.is_paused(self.http, slot.url):
                await client.resume(self.http, slot.url)
            if await client.weight_version(self.http, slot.url) != str(self.served.version):
                behind.append(slot)
        if not behind:
            return
        self.served.remote_from = await self._remote_dirs(self.served.version)
        await asyncio.gather(*(self._reload(s) for s in behind))

    def _reload_path(self, slot: ServerSlot) -> str:
        """The folder `slot`'s server reloads the served version from, on its own host."""
        path = self.served.reload_from if slot.host == 0 else self.served.remote_from.get(slot.host)
        assert path is not None, f"no folder of version {self.served.version} for host {slot.host}"
        return path

    # ---- one server ------------------------------------------------------------

    async def bring_up(self, slot: ServerSlot) -> None:
        """Restart `slot`'s server onto the served weights and check it. A server that does
        not start stays out of routing (logged); one that loaded other weights is up but
        out of routing, and WeightUpdateError is raised."""
        assert slot.process is not None
        await asyncio.to_thread(slot.process.stop)
        slot.process.start()
        try:
            await slot.process.wait_healthy(self.cfg.startup_timeout_s)
        except ServerStartError:
            log.exception("server %s failed to start on version %d", slot.url, self.served.version)
            return
        if self.mode == "reload" and self.served.reload_from is not None:  # it started from model_dir
            await client.reload_weights(
                self.http, slot.url, self.served.reload_from, self.cfg.request_timeout_s, self.cfg.worker_extension
            )
        try:
            await self._verify(slot)
        except WeightUpdateError:
            slot.healthy = True  # up, but out of routing until an update passes the check
            raise
        await client.set_weight_version(self.http, slot.url, self.served.version)
        slot.version = self.served.version
        slot.healthy = True

    async def _verify(self, slot: ServerSlot) -> None:
        """Raise WeightUpdateError, and leave `slot` out of routing, unless it loaded the
        expected weights; nothing to check before the first update."""
        if self.served.expected is None:
            return
        try:
            await verify_loaded(self.http, slot.url, self.served.expected, self.cfg.request_timeout_s)
        except WeightUpdateError:
            slot.verified = False
            raise
        slot.verified = True

    # ---- reload -----------------------------------------------------------------

    async def _reload_all(self) -> None:
        fleet = self.fleet
        # A crash restart in flight ends first (then it is updated below like the others).
        await fleet.settle_recoveries()
        updating = [s for s in fleet.slots if s.healthy]
        results = await settle(*(self._reload(s) for s in updating))
        failures = []
        for slot, result in zip(updating, results):
            if not isinstance(result, BaseException):
                continue
            if isinstance(result, WeightUpdateError) or not await self._restarted_after_death(slot):
                failures.append(f"{slot.url}: {type(result).__name__}: {result}")
        if failures:
            raise WeightUpdateError(f"weight update to version {self.served.version} failed: " + " | ".join(failures))

    async def _reload(self, slot: ServerSlot) -> None:
        served, http = self.served, self.http
        path = self._reload_path(slot)
        await client.pause(http, slot.url)
        try:
            await client.reload_weights(http, slot.url, path, self.cfg.request_timeout_s, self.cfg.worker_extension)
            # Before the version, so a server never reports it on other weights. The files were
            # checked before the pause (another host's by that host): here only that it read them.
            if served.expected is not None or (slot.host != 0 and self._checked):
                try:
                    await verify_loaded_from(http, slot.url, path, self.cfg.request_timeout_s)
                except WeightUpdateError:
                    slot.verified = False
                    raise
                slot.verified = True
            await client.set_weight_version(http, slot.url, served.version)
            reported = await client.weight_version(http, slot.url)
            if reported != str(served.version):
                raise WeightUpdateError(
                    f"server {slot.url} reports weight version {reported}, expected {served.version}"
                )
            slot.version = served.version
            # Cached prefixes hold KV from the old weights; False while frozen requests hold blocks.
            if not await client.reset_prefix_cache(http, slot.url):
                log.info("server %s kept its prefix cache (in-flight requests hold blocks)", slot.url)
        finally:
            await client.resume(http, slot.url)

    async def _restarted_after_death(self, slot: ServerSlot) -> bool:
        """A local server that died before or during an update is restarted; its restart
        loads the weights being published. True when it is back on them."""
        if slot.process is None:
            return False
        for _ in range(20):  # a server that is dying may break its connection before it is gone
            if not slot.process.alive():
                break
            await asyncio.sleep(0.1)
        else:
            return False  # alive and failing: a real update error
        self.fleet.recover(slot)
        if slot.recovering is not None:
            await slot.recovering
        return slot.routable and slot.version == self.served.version

    # ---- restart ----------------------------------------------------------------

    async def _restart_all(self, path: Path) -> None:
        fleet, version = self.fleet, self.served.version
        model = await asyncio.to_thread(serving_dir, path, Path(self.cfg.model_dir), fleet.log_dir, version)
        for slot in fleet.slots:  # any restart from now on, crash or update, starts the new weights
            assert slot.process is not None
            slot.process.set_model(str(model))
        for slot in fleet.slots:  # one at a time: the others keep serving
            assert slot.process is not None
            if slot.recovering is not None and not slot.recovering.done():
                await slot.recovering  # a crash restart in progress; it started the old weights
            slot.recovering = asyncio.create_task(self._drain_and_restart(slot))
            await slot.recovering  # raises WeightUpdateError when it loaded other weights
            if not slot.healthy:
                raise WeightUpdateError(
                    f"server {slot.url} did not come back on version {version}; log {slot.process.log_path}"
                )

    async def _drain_and_restart(self, slot: ServerSlot) -> None:
        slot.healthy = False  # new requests go to other servers, or wait for this one
        deadline = time.monotonic() + self.cfg.request_timeout_s
        while slot.load > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # in-flight requests finish on the old weights
        await self.bring_up(slot)
