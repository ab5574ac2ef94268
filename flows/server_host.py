"""Another machine's share of an rl run's servers (`inference.hosts` > 1): the
deployment lanes.server_deployment ('server-host/remote', work pool tandem-servers),
one flow run per host that the rl flow submits beside its two lanes
(flows/lanes_apart.py). It places the servers on this machine's GPUs (the device plan),
starts them, and keeps a checked copy of each published version on this machine's
disk for them to reload from (engines/rollout/server_hosts.py). It ends once the
rollout lane has left its result in the lake, or with its run (flows/parent_watch.py).
"""

from __future__ import annotations

from prefect import flow

from engines.handoff import RunContext
from engines.rollout.server_hosts import serve_host
from flows.config import RunConfig
from flows.devices import planned
from flows.lanes_apart import result_path
from flows.parent_watch import ends_with_parent
from tasks.progress import say


@flow(name="server-host", log_prints=True)
async def server_host(config: RunConfig, host: int) -> None:
    """Host `host`'s servers (1 to inference.hosts - 1; host 0 is the rollout lane's)."""
    config = planned(config)
    context = RunContext.open(config.storage, config.run)
    store = context.store
    rollout_done = store.path(result_path(config.run))
    with ends_with_parent(config.run):
        result = await serve_host(
            config.inference,
            store,
            config.run,
            host,
            context.work / f"host-{host}",
            config.inference.weight_cache_versions,
            done=lambda: store.call("check the rollout lane's result", lambda: store.fs.exists(rollout_done)),
            poll_s=config.lanes.poll_interval_s,
        )
    say(
        f"[tandem] host {host}: {result.requests} requests served, versions staged {result.staged}, "
        f"serving {result.serving} at the end; servers stopped"
    )
