"""Which published weight versions a run keeps as it goes, and deleting the rest.

Kept: the newest `keep_last` versions (the ones rollouts may still be generated
with under the staleness bound: the rollout lane uses versions >= step - k and
never one older than what it serves), every `milestone_every`-th version (v0,
the warm start, included), and every version a caller names as in use (what the
servers serve and may restart on). Everything else is deleted through
`checkpoints.drop`, record first, so no reader follows a record to missing files.

Invariant (tested): a version in use or among the newest `keep_last` is never
deleted, whatever the order of publications and calls.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage import checkpoints
from storage.fs import Store


def versions_to_keep(
    published: Iterable[int], keep_last: int, milestone_every: int, in_use: Iterable[int] = ()
) -> set[int]:
    """The published versions the policy keeps (a pure function of its arguments)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    if milestone_every < 0:
        raise ValueError(f"milestone_every must be >= 0 (0: no milestones), got {milestone_every}")
    versions = sorted(set(published))
    keep = set(versions[-keep_last:]) | (set(in_use) & set(versions))
    if milestone_every:
        keep |= {v for v in versions if v % milestone_every == 0}
    return keep


def apply_retention(
    store: Store, run: str, keep_last: int, milestone_every: int, in_use: Iterable[int] = ()
) -> list[int]:
    """Delete the published versions the policy does not keep; returns them."""
    published = checkpoints.list_versions(store, run)
    keep = versions_to_keep(published, keep_last, milestone_every, in_use)
    dropped = [v for v in published if v not in keep]
    for version in dropped:
        checkpoints.drop(store, run, version)
    if dropped:
        checkpoints.prune(store, run)
    return dropped
