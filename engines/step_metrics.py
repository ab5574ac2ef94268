"""What a step's episodes say about the policy: the one computation of the per-step
episode metrics. The rollout lane reports them as it writes a step; the trainer lane
stores them in the step's row of the `steps` table (storage.schema.STEPS). Part of the
lanes' contract beside engines/handoff.py: both lanes import it, neither from the
other's package."""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc


def _mean(table: pa.Table, column: str) -> float | None:
    value = pc.mean(pc.cast(table.column(column), "float64")).as_py()
    return None if value is None or math.isnan(value) else value


def episode_metrics(episodes: pa.Table, step: int) -> dict[str, float | int | None]:
    """Reward mean, pass rate, staleness, tokens, infra failures, the share of
    episodes with a valid action and the hack rate of a rollouts table.

    Infrastructure failures say nothing about the policy: they are left out of the
    means (their reward is NaN). A step of infra failures only has None for them.
    """
    failed = pc.fill_null(episodes.column("infra_failure"), False)
    graded = graded_episodes(episodes)
    min_version = pc.min(episodes.column("min_policy_version")).as_py()
    tokens = int(pc.sum(episodes.column("num_completion_tokens")).as_py() or 0)
    if not tokens:  # rows written without the count: count the tokens themselves
        tokens = sum(len(c or ()) for c in episodes.column("completion_ids").to_pylist())
    return {
        "reward_mean": _mean(graded, "reward"),
        "pass_rate": _mean(graded, "resolved"),
        "staleness_max": None if min_version is None else step - min_version,
        "completion_tokens": tokens,
        "infra_failures": int(pc.sum(pc.cast(failed, "int64")).as_py() or 0),
        "valid_action_share": valid_action_share(graded),
        "hack_rate": hack_rate(graded),
    }


def graded_episodes(episodes: pa.Table) -> pa.Table:
    """The episodes that did not fail in the harness: the only ones a metric of the policy counts."""
    return episodes.filter(pc.invert(pc.fill_null(episodes.column("infra_failure"), False)))


def valid_action_share(episodes: pa.Table) -> float | None:
    """Fraction of episodes with at least one valid action. 0.0 is the alarm of a run
    that learns nothing (every reward zero because no turn ever parsed: a template,
    thinking or tool-format mismatch). None when not recorded (shards before schema
    version 3) or no episode."""
    if "valid_actions" not in episodes.column_names:
        return None
    counts = [c for c in episodes.column("valid_actions").to_pylist() if c is not None]
    return sum(c > 0 for c in counts) / len(counts) if counts else None


def _recorded_flags(episodes: pa.Table) -> list[list[str]]:
    """Each episode's hack flags, leaving out the rows that never recorded them (null:
    shards before schema version 3, which cannot count as clean)."""
    if "hack_flags" not in episodes.column_names:
        return []
    return [flags for flags in episodes.column("hack_flags").to_pylist() if flags is not None]


def hack_rate(episodes: pa.Table) -> float | None:
    """Fraction of episodes the grader's hack checks caught (any entry in `hack_flags`:
    a rule of the patch monitor, engines/env/monitor.py). A reward curve alone cannot
    tell a policy that learns to fix from one that learns to fool the tests; this can.
    None when not recorded (shards before schema version 3) or no episode."""
    recorded = _recorded_flags(episodes)
    return sum(bool(flags) for flags in recorded) / len(recorded) if recorded else None


def hack_rules(episodes: pa.Table) -> Counter[str]:
    """How many episodes each hack flag (a rule's name) was raised in."""
    return Counter(flag for flags in _recorded_flags(episodes) for flag in set(flags))
