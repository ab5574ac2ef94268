"""Weight update by restart (`weight_update='restart'`, local servers only), one server at a time.

Every later start of any server, crash restarts too, uses the new weights. Then per
server in turn: route new requests elsewhere (or hold them), let its in-flight
requests finish on the old weights, restart it on the new ones, check what it
loaded against the export (weight_check.py), set the version. The others keep
serving meanwhile; each completion carries the version its server had when the
request was sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from engines.inference import routes
from engines.inference.server_fleet import ServerFleet
from engines.inference.server_process import ServerStartError
from engines.inference.server_slot import ServerSlot
from engines.inference.weight_check import WeightUpdateError
from engines.inference.weight_dirs import serving_dir

log = logging.getLogger(__name__)


class RestartUpdate:
    def __init__(self, fleet: ServerFleet) -> None:
        self.fleet = fleet

    async def apply(self, path: Path) -> None:
        """Restart every server on the weights in `path` (the version in `fleet.served`)."""
        fleet = self.fleet
        version = fleet.served.version
        model = await asyncio.to_thread(serving_dir, path, Path(fleet.cfg.model_dir), fleet.log_dir, version)
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
        assert slot.process is not None
        fleet = self.fleet
        slot.healthy = False  # new requests go to other servers, or wait for this one
        deadline = time.monotonic() + fleet.cfg.request_timeout_s
        while slot.load > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # in-flight requests finish on the old weights
        await asyncio.to_thread(slot.process.stop)
        slot.process.start()
        try:
            await slot.process.wait_healthy(fleet.cfg.startup_timeout_s)
        except ServerStartError:
            log.exception("server %s failed to start on version %d", slot.url, fleet.served.version)
            return
        try:
            await fleet.verify(slot)
        except WeightUpdateError:
            slot.healthy = True  # up, but out of routing until an update passes the check
            raise
        await routes.set_weight_version(fleet.http, slot.url, fleet.served.version)
        slot.version = fleet.served.version
        slot.healthy = True
