"""Train / held-out splits of real-project tasks, by project and by task.

Two questions need two kinds of held-out task:
  * "project": every task of a project the policy never trains on (does it fix bugs
    in code it has not seen?);
  * "task": a hash-chosen share of the other projects' tasks (does it fix new bugs in
    code it has trained on?).
`Task.split` only says train or heldout (the corpus schema), so the kind is kept in
the task's metadata JSON under "heldout"; `heldout_kind` reads it back.

The split is a pure function of the task id, its project and the split settings, and
is applied when a corpus is assembled (builder.py), not when a mutant is kept: a
change of held-out projects or fraction re-splits a cached build without running a
single test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import replace
from typing import Literal

from engines.env.types import Task

HeldoutKind = Literal["project", "task"]
HELDOUT_KEY = "heldout"  # metadata key holding the HeldoutKind of a held-out task


def task_heldout(instance_id: str, fraction: float) -> bool:
    """Whether a task of a training project is held out: a hash of its id, so the same
    task lands in the same split on every rebuild, whatever else the corpus holds."""
    return int(hashlib.sha256(instance_id.encode()).hexdigest(), 16) % 1000 < fraction * 1000


def split_kind(
    instance_id: str, project: str, heldout_projects: Collection[str], fraction: float
) -> HeldoutKind | None:
    """The held-out kind of a task of `project`, or None when it is a training task."""
    if project in heldout_projects:
        return "project"
    return "task" if task_heldout(instance_id, fraction) else None


def assign_split(task: Task, heldout_projects: Collection[str], fraction: float) -> Task:
    """`task` with its split and its metadata's "heldout" kind set from the settings
    (the key is removed from a training task, so a re-split leaves no stale kind)."""
    kind = split_kind(task.instance_id, task.repo, heldout_projects, fraction)
    meta = task.meta()
    meta.pop(HELDOUT_KEY, None)
    if kind is not None:
        meta[HELDOUT_KEY] = kind
    return replace(task, split="heldout" if kind else "train", metadata=json.dumps(meta))


def heldout_kind(task: Task) -> HeldoutKind | None:
    """ "project" or "task" for a held-out real-project task, None for a training task.
    A held-out task built before kinds were recorded (no key) counts as "task"."""
    if task.split != "heldout":
        return None
    kind = task.meta().get(HELDOUT_KEY)
    return kind if kind in ("project", "task") else "task"
