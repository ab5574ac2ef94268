"""Prefect objects a deployment needs, created idempotently: the process work pools,
and each run's concurrency limits, which its lanes take slots from (tasks/limits.py;
a limit whose name does not exist would be skipped with only a warning)."""

from __future__ import annotations

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectAlreadyExists

from tasks.limits import run_limits

WORK_POOL = "tandem-process"
# Lanes on different machines (flows/lanes_apart.py): one pool per kind of machine.
LANE_POOLS = ("tandem-rollout", "tandem-trainer", "tandem-servers")


def ensure_limits(run: str) -> None:
    """`run`'s limits, created when missing (the rl and replay flows call this first)."""
    with get_client(sync_client=True) as client:
        for name, slots in run_limits(run).items():
            client.upsert_global_concurrency_limit_by_name(name, slots)


def ensure_work_pool(name: str = WORK_POOL) -> None:
    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            pass


def setup() -> None:
    for pool in (WORK_POOL, *LANE_POOLS):
        ensure_work_pool(pool)
