"""Weight update by in-place reload (`weight_update='reload'`, the default), on every server at once.

Per server: pause (in-flight requests kept) -> reload through our worker extension
(exact for the CPU build's MoE experts too) -> check the loaded weights against the
export (weight_check.py; one digest pass over the checkpoint per worker, while
paused) -> set and read back the version -> drop the prefix cache -> resume, always.

A server found dead before or during the update is restarted on the new weights
(ServerFleet) and counts as updated once it is back on them and checked. A server
that loaded other weights fails the update and is left out of routing until a
later update passes the check.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from engines.inference import routes
from engines.inference.server_fleet import ServerFleet
from engines.inference.server_slot import ServerSlot
from engines.inference.weight_check import WeightUpdateError
from engines.inference.weight_dirs import reload_dir

log = logging.getLogger(__name__)


class ReloadUpdate:
    def __init__(self, fleet: ServerFleet) -> None:
        self.fleet = fleet

    async def apply(self, path: Path) -> None:
        """Load the weights in `path` (the version in `fleet.served`) into every server."""
        fleet, cfg = self.fleet, self.fleet.cfg
        staging = fleet.log_dir if cfg.local else None  # attached servers must see it: beside the weights
        fleet.served.reload_from = str(await asyncio.to_thread(reload_dir, path, Path(cfg.model_dir), staging))
        # A crash restart in flight ends first (then it is updated below like the others).
        await fleet.settle_recoveries()
        updating = [s for s in fleet.slots if s.healthy]
        results = await asyncio.gather(*(self._update_server(s) for s in updating), return_exceptions=True)
        failures = []
        for slot, result in zip(updating, results):
            if not isinstance(result, BaseException):
                continue
            if isinstance(result, WeightUpdateError) or not await fleet.restarted_after_death(slot):
                failures.append(f"{slot.url}: {type(result).__name__}: {result}")
        if failures:
            raise WeightUpdateError(f"weight update to version {fleet.served.version} failed: " + " | ".join(failures))

    async def _update_server(self, slot: ServerSlot) -> None:
        fleet, served, http = self.fleet, self.fleet.served, self.fleet.http
        assert served.reload_from is not None
        await routes.pause(http, slot.url)
        try:
            await routes.reload_weights(
                http, slot.url, served.reload_from, fleet.cfg.request_timeout_s, fleet.cfg.worker_extension
            )
            await fleet.verify(slot)  # before the version: a server never reports it on other weights
            await routes.set_weight_version(http, slot.url, served.version)
            reported = await routes.weight_version(http, slot.url)
            if reported != str(served.version):
                raise WeightUpdateError(
                    f"server {slot.url} reports weight version {reported}, expected {served.version}"
                )
            slot.version = served.version
            # Cached prefixes hold KV from the old weights; False while frozen requests hold blocks.
            if not await routes.reset_prefix_cache(http, slot.url):
                log.info("server %s kept its prefix cache (in-flight requests hold blocks)", slot.url)
        finally:
            await routes.resume(http, slot.url)
