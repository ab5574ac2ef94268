"""Group-relative advantages: reward minus the group's mean reward.

The trainer owns them: it computes them from the stored rewards with its own
settings (a replay may train the same episodes with other ones) and records what it
trained on in the run's `advantages` table (storage.schema.ADVANTAGES). The rollout
lane stores rewards only.

Rules (tested in tests/engines/trainer/test_advantages.py):
- Episodes with `infra_failure` are left out of their group's statistics and get no
  advantage (NaN): the harness failed, not the model.
- Optional std scaling divides by the group's reward standard deviation (population,
  plus eps), as in GRPO.
- `negative_scale` weighs below-mean episodes (1: the plain baseline; 0: learn only
  from episodes that beat their group, as rejection-sampling fine-tuning does). When
  successes are rare, each group pushes many failing episodes down, and those share
  most of their tokens (format, copied code) with what succeeds elsewhere.
- A group whose advantages are all zero (every member got the same reward, or only
  one member survived) carries no learning signal and is dropped before batching.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EPS = 1e-6


@dataclass(frozen=True)
class GroupAdvantages:
    advantage: np.ndarray  # float64 [episodes]; NaN for infra failures
    keep: np.ndarray  # bool [episodes]; False: infra failure or zero-advantage group


def group_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    infra_failure: np.ndarray | None = None,
    std_scale: bool = False,
    negative_scale: float = 1.0,
) -> GroupAdvantages:
    """Advantages over plain arrays (one entry per episode)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    groups = np.asarray(group_ids, dtype=object)
    failed = np.zeros(len(rewards), bool) if infra_failure is None else np.asarray(infra_failure, dtype=bool)
    if np.isnan(rewards[~failed]).any():
        bad = int(np.flatnonzero(np.isnan(rewards) & ~failed)[0])
        raise ValueError(f"reward of episode {bad} is NaN but infra_failure is false: mark it as an infra failure")
    advantage = np.full(len(rewards), np.nan)
    keep = np.zeros(len(rewards), bool)
    for g in dict.fromkeys(groups.tolist()):
        members = np.flatnonzero((groups == g) & ~failed)
        if len(members) == 0:
            continue
        r = rewards[members]
        a = r - r.mean()
        if std_scale:
            a = a / (r.std() + _EPS)
        keep[members] = bool(np.any(np.abs(a) > _EPS))
        advantage[members] = np.where(a < 0, negative_scale * a, a)
    return GroupAdvantages(advantage, keep)


def step_advantages(episodes: pa.Table, std_scale: bool = False, negative_scale: float = 1.0) -> GroupAdvantages:
    """Advantages of a rollouts table's episodes, from their `reward` (the stored
    `advantage` column is never read: the trainer is the one owner of advantages).

    Episodes without a `group_id` form a group of one (so they are dropped: a group of
    one has no baseline).
    """
    n = episodes.num_rows
    groups = episodes.column("group_id").to_pylist() if "group_id" in episodes.column_names else [None] * n
    groups = [g if g is not None else f"__episode_{i}" for i, g in enumerate(groups)]
    failed = pc.fill_null(episodes.column("infra_failure"), False).to_numpy(zero_copy_only=False)
    rewards = pc.fill_null(episodes.column("reward"), float("nan")).to_numpy(zero_copy_only=False)
    return group_advantages(rewards, np.array(groups, dtype=object), failed, std_scale, negative_scale)


def trainable_episodes(episodes: pa.Table, adv: GroupAdvantages) -> pa.Table:
    """The episodes `adv` keeps, their `advantage` column set to `adv`'s values."""
    column = pa.array(adv.advantage, pa.float64())
    if "advantage" in episodes.column_names:
        table = episodes.set_column(episodes.column_names.index("advantage"), "advantage", column)
    else:
        table = episodes.append_column("advantage", column)
    return table.filter(pa.array(adv.keep))


def with_group_advantages(episodes: pa.Table, std_scale: bool = False, negative_scale: float = 1.0) -> pa.Table:
    """The trainable episodes of a rollouts table, with `advantage` computed from `reward`."""
    return trainable_episodes(episodes, step_advantages(episodes, std_scale, negative_scale))


def advantages_record(
    episodes: pa.Table, adv: GroupAdvantages, run: str, step: int, rollouts_run: str | None = None
) -> pa.Table:
    """Rows of the `advantages` table (storage.schema.ADVANTAGES): what run `run`'s
    trainer gave each episode of step `step`, read from `rollouts_run`'s rollouts."""
    n = episodes.num_rows

    def column(name: str) -> pa.ChunkedArray | pa.Array:
        return episodes.column(name) if name in episodes.column_names else pa.nulls(n)

    return pa.table(
        {
            "run_id": [run] * n,
            "step": [step] * n,
            "rollouts_run": [rollouts_run or run] * n,
            "task_id": column("task_id"),
            "group_id": column("group_id"),
            "sample_index": column("sample_index"),
            "reward": column("reward"),
            "advantage": pa.array(adv.advantage, pa.float64(), mask=np.isnan(adv.advantage)),
            "trained": pa.array(adv.keep, pa.bool_()),
        }
    )
