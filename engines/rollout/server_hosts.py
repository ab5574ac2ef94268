"""Servers on several machines (`inference.hosts` > 1), reported through the lake.

Each host other than the rollout lane's own runs `serve_host`: it starts its share of
the servers on the newest published version, then copies every version the trainer
publishes into its own bounded cache (weight_cache.py), checks the copy against the
export's digests and records where its servers reload it from. The record,
`<run>/servers/host-<h>.json`, is rewritten whole (atomically) after each change:

    {"urls": [...], "started_on": 3, "staged": {"3": "/cache/.../v3", "4": ...}}

The rollout lane's pool reads it through `LakeHosts` (the RemoteHosts of
engines/inference/remote_hosts.py): the URLs once they answer, and for each update the
folder of that version on that host, before any server pauses. A host's servers are
its own: they stop when its lane ends, which it does once the rollout lane has left
its result in the lake (`done`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engines.inference import client, disaggregation
from engines.inference.config import InferenceConfig
from engines.inference.server_fleet import ServerFleet
from engines.inference.weight_files import expected_digests, reload_dir, verify_files
from engines.rollout.weight_cache import WeightCache
from storage import checkpoints
from storage.atomic import write_bytes_atomic
from storage.errors import NotFoundError
from storage.fs import Store

log = logging.getLogger(__name__)


def record_path(run: str, host: int) -> str:
    """Where host `host` reports its servers, relative to the lake root."""
    return f"{run}/servers/host-{host}.json"


@dataclass
class HostRecord:
    urls: list[str]
    started_on: int  # the version its servers started on
    staged: dict[int, str] = field(default_factory=dict)  # version -> the folder its servers reload it from

    def to_json(self) -> bytes:
        staged = {str(v): p for v, p in sorted(self.staged.items())}
        return json.dumps({"urls": self.urls, "started_on": self.started_on, "staged": staged}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> HostRecord:
        raw = json.loads(data)
        return cls(raw["urls"], raw["started_on"], {int(v): p for v, p in raw["staged"].items()})


@dataclass(frozen=True)
class HostResult:
    staged: list[int]  # every version staged, in order
    requests: int  # requests its servers finished
    serving: list[int]  # the version each of its servers served at the end


def read_record(store: Store, run: str, host: int) -> HostRecord | None:
    path = store.path(record_path(run, host))
    if not store.call(f"check {path}", lambda: store.fs.exists(path)):
        return None
    return HostRecord.from_json(store.call(f"read {path}", lambda: store.fs.cat_file(path)))


class LakeHosts:
    """The other hosts' servers as their records say, waited for up to `timeout_s`."""

    def __init__(self, store: Store, run: str, timeout_s: float, poll_s: float = 1.0) -> None:
        self.store, self.run, self.timeout_s, self.poll_s = store, run, timeout_s, poll_s

    async def server_urls(self, host: int) -> list[str]:
        """Its servers' URLs once every one answers (a record left by a host lane that
        died names servers that do not: its next run writes a new one)."""
        async with httpx.AsyncClient(timeout=5.0) as http:
            record = await self._wait(host, "servers", lambda r: True)
            while not all(await asyncio.gather(*(client.health(http, u) for u in record.urls))):
                record = await self._wait(host, "servers", lambda r: True, after=self.poll_s)
        return record.urls

    async def reload_from(self, host: int, version: int) -> str:
        record = await self._wait(host, f"checked copy of version {version}", lambda r: version in r.staged)
        return record.staged[version]

    async def _wait(self, host: int, what: str, ready: Callable[[HostRecord], bool], after: float = 0.0) -> HostRecord:
        await asyncio.sleep(after)
        deadline = time.monotonic() + self.timeout_s
        while True:
            record = await asyncio.to_thread(read_record, self.store, self.run, host)
            if record is not None and ready(record):
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"host {host} reported no {what} in {record_path(self.run, host)} within {self.timeout_s:g} s: "
                    "is a worker of the server-host deployment's pool (tandem-servers) running on that machine? "
                    "Its flow run's log says what it did"
                )
            await asyncio.sleep(self.poll_s)


async def serve_host(
    cfg: InferenceConfig,
    store: Store,
    run: str,
    host: int,
    work: Path,
    cache_versions: int,
    done: Callable[[], bool],
    poll_s: float = 1.0,
) -> HostResult:
    """Host `host`'s servers, from the newest published version until `done()`; each later
    version copied to `work`, checked, and recorded."""
    latest = checkpoints.latest(store, run)
    if latest is None:
        raise RuntimeError(f"run {run!r} has no published weights: the rl flow warm-starts it before the lanes")
    cache = WeightCache(store, work / "weights", cache_versions)
    start = await asyncio.to_thread(cache.local_dir, latest.uri, latest.version, {latest.version})
    log_dir = Path(cfg.log_dir) if cfg.log_dir else work / "vllm-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cfg = cfg.model_copy(update={"model_dir": str(start), "log_dir": str(log_dir)})
    await asyncio.to_thread(_forget, store, run, host)  # a record of an earlier run of this host names dead servers
    async with httpx.AsyncClient(timeout=httpx.Timeout(cfg.request_timeout_s, connect=cfg.connect_timeout_s)) as http:
        fleet = ServerFleet(cfg, http, latest.version, log_dir, disaggregation.shared_kv_path(cfg, log_dir))
        try:
            await fleet.start_local(host)
            for slot in fleet.slots:
                await client.set_weight_version(http, slot.url, latest.version)
            record = HostRecord([s.url for s in fleet.slots], latest.version)
            stager = _Stager(cfg, cache, log_dir, record)
            await stager.stage(latest.version, latest.uri, http)
            await asyncio.to_thread(write_bytes_atomic, store, record_path(run, host), record.to_json())
            log.info("host %d: %d server(s) on version %d: %s", host, len(record.urls), latest.version, record.urls)
            while not await asyncio.to_thread(done):
                for version in await asyncio.to_thread(checkpoints.list_versions, store, run):
                    if version > max(record.staged):
                        try:
                            uri = (await asyncio.to_thread(checkpoints.get, store, run, version)).uri
                        except NotFoundError:
                            continue  # retention dropped it since the listing: nobody will ask for it
                        await stager.stage(version, uri, http)
                        await asyncio.to_thread(write_bytes_atomic, store, record_path(run, host), record.to_json())
                        log.info("host %d: version %d staged at %s", host, version, record.staged[version])
                await asyncio.sleep(poll_s)
            requests = await asyncio.gather(*(client.finished_requests(http, u) for u in record.urls))
            serving = await asyncio.gather(*(client.weight_version(http, u) for u in record.urls))
            return HostResult(stager.staged, sum(requests), [int(v) for v in serving])
        finally:
            await fleet.stop()


class _Stager:
    """Copies published versions into the host's cache and checks them, keeping in use
    what its servers serve or started from."""

    def __init__(self, cfg: InferenceConfig, cache: WeightCache, log_dir: Path, record: HostRecord) -> None:
        self.cfg, self.cache, self.log_dir, self.record = cfg, cache, log_dir, record
        self.staged: list[int] = []

    async def stage(self, version: int, uri: str, http: httpx.AsyncClient) -> None:
        served = {int(await client.weight_version(http, u)) for u in self.record.urls}
        copy = await asyncio.to_thread(self.cache.local_dir, uri, version, served | {self.record.started_on})
        folder = await asyncio.to_thread(reload_dir, copy, Path(self.cfg.model_dir), self.log_dir)
        if self.cfg.verify_checksums and self.cfg.worker_extension:
            await asyncio.to_thread(verify_files, folder, await asyncio.to_thread(expected_digests, copy))
        self.record.staged[version] = str(folder)
        self.staged.append(version)
        # Versions the cache let go of are no longer there to reload.
        self.record.staged = {v: p for v, p in self.record.staged.items() if _whole(Path(p))}


def _whole(folder: Path) -> bool:
    """Every weight file of `folder` is there (links into an evicted copy are not)."""
    files = list(folder.glob("*.safetensors"))
    return bool(files) and all(f.exists() for f in files)


def _forget(store: Store, run: str, host: int) -> None:
    path = store.path(record_path(run, host))
    if store.call(f"check {path}", lambda: store.fs.exists(path)):
        store.call(f"delete {path}", lambda: store.fs.rm(path))
