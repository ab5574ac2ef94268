"""The rollout lane's process kept off the trainer lane's cores.

The trainer lane is pinned to the highest cores (flows/trainer_lane.py) and vLLM's
engine binds the lowest (engines/inference/launch.py), but the rest of the rollout
side floated: this process (agent loop, tokenizer, Prefect client), vLLM's API
server and the grading sandboxes it starts. On 2 cores they took about half of the
trainer's core: the default run's mean `training_s` was 4.36 s against 2.08 s with
them kept apart, at the same generation speed (docs/2026-12-05-trainer-step.md).

Linux sets affinity per thread: every thread of this process moves, and processes
and threads started meanwhile inherit it. On leaving, every thread gets the
process's former cores back (a Prefect worker runs later flows in this process).
The embedded Prefect server, restarted from a thread that moved, keeps every core
(flows/prefect_api.py): confined beside a busy engine under load, its restart
outlasted the lanes' client retries and a resumed run lost its training slot.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path


@contextlib.contextmanager
def cores_apart(taken: Iterable[int]) -> Iterator[None]:
    """Inside: this process's threads run on its cores other than `taken` (unchanged when
    none would be left, or where the platform has no per-thread affinity)."""
    before = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    others = before - set(taken)
    if not others or others == before:
        yield
        return
    _pin_threads(others)
    try:
        yield
    finally:
        _pin_threads(before)


def _pin_threads(cores: set[int]) -> None:
    for tid in os.listdir("/proc/self/task") if Path("/proc/self/task").is_dir() else []:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)
