"""Prefect objects a deployment needs, created idempotently: the process work pools
and the global concurrency limits the tasks take slots from (a limit whose name
does not exist would be skipped with only a warning)."""

from __future__ import annotations

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectAlreadyExists

from tasks.limits import ROLLOUT_LIMIT, TRAINING_LIMIT

WORK_POOL = "tandem-process"
# Lanes on different machines (flows/lanes_apart.py): one pool per kind of machine.
LANE_POOLS = ("tandem-rollout", "tandem-trainer")
LIMITS = {TRAINING_LIMIT: 1, ROLLOUT_LIMIT: 1}  # name -> slots


def ensure_limits() -> None:
    with get_client(sync_client=True) as client:
        for name, slots in LIMITS.items():
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
    ensure_limits()
