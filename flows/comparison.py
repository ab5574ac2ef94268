"""Held-out results before and after RL, side by side, with how sure the gain is.

Both evaluations ran the same tasks under the same protocol and decoding, so the
greedy outcomes pair up task by task: the exact McNemar test on the discordant
tasks says how likely a difference this large is with no real change. The verdict
line says it in words, since that is what a reader wants from the summary.
"""

from __future__ import annotations

from typing import Any

from engines.env.task_sources.splits import heldout_kind
from engines.env.types import Task
from engines.rollout.attempts import mcnemar_p


def heldout_comparison(before: dict[str, Any], after: dict[str, Any], k: int) -> dict[str, Any]:
    """Summary rows comparing two stored evaluations of the same held-out tasks."""
    gain = round(100 * (after["pass@1"] - before["pass@1"]), 1)
    rows: dict[str, Any] = {
        "pass@1 before RL (warm start)": before["pass@1"],
        "pass@1 after RL": after["pass@1"],
        "pass@1 gain (points)": gain,
    }
    if "solved" in before and "solved" in after:
        ids = sorted(set(before["solved"]) | set(after["solved"]))
        fixed = len(set(after["solved"]) - set(before["solved"]))
        lost = len(set(before["solved"]) - set(after["solved"]))
        p = mcnemar_p([i in before["solved"] for i in ids], [i in after["solved"] for i in ids])
        rows["tasks newly solved / lost"] = f"{fixed} / {lost}"
        rows["p-value (exact McNemar, paired)"] = float(f"{p:.3g}")
        rows["verdict"] = _verdict(gain, p)
    sampled = ("pass@1_sampled", f"pass@{k}") if k > 1 else ("pass@1_sampled",)
    for key in ("first_attempt_pass@1", "mean_attempts", "retry_repeat_rate", *sampled):
        if key in before and key in after:
            rows[f"{key} before / after"] = f"{before[key]:.3f} / {after[key]:.3f}"
    rows["held-out tasks"] = after["tasks"]
    return rows


def group_rows(before: dict[str, Any], after: dict[str, Any], groups: dict[str, list[str]]) -> dict[str, Any]:
    """Greedy pass@1 before / after and the paired McNemar p within each group of the
    evaluated held-out task ids (held-out projects, held-out tasks of training projects).
    Groups with no task are left out; without the solved ids nothing can be split."""
    if "solved" not in before or "solved" not in after:
        return {}
    rows: dict[str, Any] = {}
    solved_before, solved_after = set(before["solved"]), set(after["solved"])
    for name, ids in groups.items():
        if not ids:
            continue
        was, now = [i in solved_before for i in ids], [i in solved_after for i in ids]
        rows[f"pass@1 on {name} before / after ({len(ids)} tasks)"] = (
            f"{sum(was) / len(ids):.3f} / {sum(now) / len(ids):.3f}"
        )
        rows[f"p-value on {name} (exact McNemar, paired)"] = float(f"{mcnemar_p(was, now):.3g}")
    return rows


def heldout_groups(evaluated: list[Task]) -> dict[str, list[str]]:
    """The evaluated held-out tasks of a corpus by kind (engines/env/task_sources/splits.py); micro tasks have no kind."""
    kinds = {t.instance_id: heldout_kind(t) for t in evaluated if t.env_name != "micro"}
    return {
        "held-out projects": [i for i, k in kinds.items() if k == "project"],
        "held-out tasks of training projects": [i for i, k in kinds.items() if k == "task"],
    }


def format_p(p: float) -> str:
    """A p-value as people read it: in scientific notation, since rounding to a few
    decimals turns a p of 1e-16 into 0.0, which claims certainty no test gives."""
    return f"{p:.2e}"


def is_p_value(key: str) -> bool:
    """Whether a summary row holds a p-value (the whole test set's or a group's)."""
    return key.startswith("p-value")


def _verdict(gain: float, p: float) -> str:
    direction = "gained" if gain > 0 else "lost" if gain < 0 else "did not change"
    if gain == 0:
        return "RL did not change held-out greedy pass@1"
    sure = (
        "significant at p < 0.01"
        if p < 0.01
        else "significant at p < 0.05"
        if p < 0.05
        else "not significant (could be chance)"
    )
    return f"RL {direction} {abs(gain):.1f} points of held-out greedy pass@1, {sure}"
