"""A lane ends with its run: a lane started as a deployment on another machine
(flows/lanes_apart.py) has no process link to the `rl` flow run that submitted it, so
when that run dies the lane would keep its servers or trainer ranks until someone
cancels it. It watches its parent through Prefect instead, and ends itself when

- the parent flow run is in a final state (Crashed, as a worker reports a killed flow
  process; Failed; Cancelled; Completed), or
- the parent's lease on the run's liveness limit (`tandem-run:<run>`, tasks/limits.py,
  renewed by the rl flow every 3/4 of SLOT_LEASE_S) has run out: its process was
  killed with nothing left to report it, as a SIGKILLed `tandem run`.

A lane ends within about SLOT_LEASE_S plus one poll of its parent's death. Ending is an
interrupt (SIGINT: the lane's own cleanup stops its servers and ranks), then, if the
lane is still there after a grace period, an exit. A lane with no parent (run on its
own) is not watched.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run

from tasks.limits import run_limit
from tasks.progress import say

POLL_S = 10.0
GRACE_S = 30.0  # after the interrupt, before the exit


class ParentWatch:
    """The parent flow run of this one, and whether it is gone (see the module docstring)."""

    def __init__(self, parent: UUID, run: str) -> None:
        self.parent, self.limit = parent, run_limit(run)
        self.lease_seen = False  # the parent held the run's lease once: its lapse means death

    def gone(self, client: SyncPrefectClient) -> str | None:
        """Why the parent is gone, or None while it lives."""
        state = client.read_flow_run(self.parent).state
        if state is not None and state.is_final():
            return f"its rl flow run is {state.type.value}"
        try:
            held = client.read_global_concurrency_limit_by_name(self.limit).active_slots > 0
        except ObjectNotFound:
            return None  # a run without the limit: its state is all there is to watch
        if held:
            self.lease_seen = True
        elif self.lease_seen:
            return f"its rl flow's lease on {self.limit} ran out (the process was killed)"
        return None


def parent_of_this_run() -> UUID | None:
    """The flow run this one is a child of (a deployment run submitted by a flow, or a
    child run created by flows/trainer_lane.py); None for a top-level run."""
    parent = flow_run.get_parent_flow_run_id()
    return UUID(str(parent)) if parent else None


@contextmanager
def ends_with_parent(run: str, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> Iterator[None]:
    """Watch this flow run's parent while the block runs; interrupt this process, then
    exit it, once the parent is gone."""
    parent = parent_of_this_run()
    if parent is None:
        yield
        return
    done = threading.Event()
    watch = ParentWatch(parent, run)
    thread = threading.Thread(target=_watch, args=(watch, done, poll_s, grace_s), name="parent-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def _watch(watch: ParentWatch, done: threading.Event, poll_s: float, grace_s: float) -> None:
    failing = False
    with get_client(sync_client=True) as client:
        while not done.wait(poll_s):
            try:
                why = watch.gone(client)
            except Exception as exc:  # the API away for a while (a restart): the lane goes on, polling
                if not failing:
                    say(f"[tandem] this lane cannot read its rl flow run ({exc}); it keeps trying")
                failing = True
                continue
            failing = False
            if why is not None:
                break
        else:
            return
    say(f"[tandem] ending this lane: {why}")
    signal.raise_signal(signal.SIGINT)  # KeyboardInterrupt in the main thread: the lane cleans up
    if not done.wait(grace_s):
        say(f"[tandem] the lane did not end within {grace_s:.0f} s of its interrupt; exiting")
        os._exit(1)
