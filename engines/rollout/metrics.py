"""What a step's episodes say about the policy: the one computation of the per-step
episode metrics. The rollout lane reports them as it writes a step; the trainer lane
stores them in the step's row of the `steps` table (storage.schema.STEPS)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc


def _mean(table: pa.Table, column: str) -> float | None:
    value = pc.mean(pc.cast(table.column(column), "float64")).as_py()
    return None if value is None or math.isnan(value) else value


def episode_metrics(episodes: pa.Table, step: int) -> dict[str, float | int | None]:
    """Reward mean, pass rate, staleness, tokens, infra failures and the share of
    episodes with a valid action of a rollouts table.

    Infrastructure failures say nothing about the policy: they are left out of the
    means (their reward is NaN). A step of infra failures only has None for them.
    """
    failed = pc.fill_null(episodes.column("infra_failure"), False)
    graded = episodes.filter(pc.invert(failed))
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
    }


def valid_action_share(episodes: pa.Table) -> float | None:
    """Fraction of episodes with at least one valid action. 0.0 is the alarm of a run
    that learns nothing (every reward zero because no turn ever parsed: a template,
    thinking or tool-format mismatch). None when not recorded (shards before schema
    version 3) or no episode."""
    if "valid_actions" not in episodes.column_names:
        return None
    counts = [c for c in episodes.column("valid_actions").to_pylist() if c is not None]
    return sum(c > 0 for c in counts) / len(counts) if counts else None
