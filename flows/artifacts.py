"""What a user sees of a run in the Prefect UI: a per-step table, reward and
pass-rate curves as a picture, and a summary with a ready `tandem query` that links
the other two.

The table and the curve keep one key per run and are created again after every
rollout step: each creation under a key is a new version of that artifact, so the UI
always shows the newest and keeps the history. The rl flow's summary replaces them
with the trainer's full per-step table at the end.

The async artifact calls are used because the flows are async: Prefect's sync
variants turn into un-awaited coroutines there and silently create nothing."""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers and CI
import matplotlib.pyplot as plt
from prefect.artifacts import acreate_image_artifact, acreate_markdown_artifact, acreate_table_artifact
from prefect.settings import PREFECT_UI_URL

from flows.comparison import format_p, is_p_value

STEP_COLUMNS = [
    "step",
    "policy_version",
    "reward_mean",
    "pass_rate",
    "hack_rate",
    "staleness_max",
    "completion_tokens",
    "generation_s",
    "training_s",
    "loss",
    "mismatch_kl",
]


def slug(run: str) -> str:
    # Artifact keys allow lowercase letters, digits and dashes only.
    return "".join(c if c.isalnum() else "-" for c in run.lower()).strip("-")


EVAL_COLOR = "#d62728"  # the held-out evaluations stand apart from the training curves


def evaluation_marks(
    steps: list[dict[str, Any]], before: float | None = None, after: float | None = None
) -> list[tuple[str, float, float]]:
    """(label, step, held-out greedy pass@1) of each evaluation known so far: before RL
    at step 0 (the warm start, v0), after RL one past the last step (its last version)."""
    marks = []
    if before is not None:
        marks.append((f"held-out before RL {before:.3f}", 0.0, before))
    if after is not None:
        last = max((r["step"] for r in steps), default=-1)
        marks.append((f"held-out after RL {after:.3f}", float(last + 1), after))
    return marks


def curve_png(steps: list[dict[str, Any]], before: float | None = None, after: float | None = None) -> bytes:
    """Reward and pass rate per step, and the held-out evaluations (`before`, `after`:
    greedy pass@1) as marks, as PNG bytes: whether the training curve's rise carried
    over to unseen tasks is read off one picture."""
    xs = [r["step"] for r in steps]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    ax.plot(xs, [r.get("reward_mean") for r in steps], marker="o", ms=3, label="mean reward")
    ax.plot(xs, [r.get("pass_rate") for r in steps], marker="s", ms=3, label="pass rate")
    for label, x, y in evaluation_marks(steps, before, after):
        ax.plot([x], [y], marker="*", ms=14, ls="none", color=EVAL_COLOR)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8, color=EVAL_COLOR)
    ax.set_xlabel("step")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def steps_key(run: str) -> str:
    return f"{slug(run)}-steps"


def curve_key(run: str) -> str:
    return f"{slug(run)}-curve"


async def publish_step_artifacts(
    run: str, steps: list[dict[str, Any]], before: float | None = None, after: float | None = None
) -> None:
    """Table of per-step metrics and the curve image (as a data URL, no file server needed):
    a new version of each of the run's two artifacts. `before` and `after`: the held-out
    greedy pass@1 of the evaluations done so far, marked on the curve."""
    rows = [{c: _fmt(r.get(c)) for c in STEP_COLUMNS} for r in steps]
    await acreate_table_artifact(key=steps_key(run), table=rows, description=f"Per-step metrics of run {run}")
    url = "data:image/png;base64," + base64.b64encode(curve_png(steps, before, after)).decode()
    await acreate_image_artifact(image_url=url, key=curve_key(run), description=f"Reward and pass rate of run {run}")


def artifact_link(key: str) -> str:
    """A markdown link to the artifact's page (all its versions) in the Prefect UI."""
    ui = PREFECT_UI_URL.value()
    return f"[`{key}`]({ui.rstrip('/')}/artifacts/key/{key})" if ui else f"`{key}`"


async def publish_summary(run: str, root: str, summary: dict[str, Any]) -> str:
    """The summary artifact (summary_markdown); returns its markdown."""
    markdown = summary_markdown(run, root, summary)
    await acreate_markdown_artifact(key=f"{slug(run)}-summary", markdown=markdown, description=f"Summary of run {run}")
    return markdown


def summary_markdown(run: str, root: str, summary: dict[str, Any]) -> str:
    """Markdown summary with the trajectory location and a query to start from."""
    lines = [f"# Run `{run}`", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {summary_cell(k, v)} |" for k, v in summary.items()]
    lines += [
        "",
        f"Trajectories: `{root}/{run}/rollouts/` (Parquet, one row per episode).",
        "",
        "```bash",
        f"tandem query --root {root} --run {run} \\",
        '  "SELECT step, avg(reward) AS reward, avg(resolved::INT) AS pass_rate, '
        'max(step - min_policy_version) AS staleness FROM rollouts GROUP BY step ORDER BY step"',
        "```",
        "",
        f"Per-step table: {artifact_link(steps_key(run))}; reward and pass-rate curve: {artifact_link(curve_key(run))}.",
    ]
    return "\n".join(lines)


def summary_cell(key: str, value: Any) -> Any:
    """A summary row's value as shown: p-values in scientific notation, other floats
    rounded to 4 decimals."""
    return format_p(value) if is_p_value(key) and isinstance(value, float) else _fmt(value)


def _fmt(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v
