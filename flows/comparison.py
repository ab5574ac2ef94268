"""Held-out results before and after RL, side by side, with how sure the gain is.

Both evaluations ran the same tasks under the same protocol and decoding, so the
greedy outcomes pair up task by task: the exact McNemar test on the discordant
tasks says how likely a difference this large is with no real change. The verdict
line says it in words, since that is what a reader wants from the summary.
"""

from __future__ import annotations

from typing import Any

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
