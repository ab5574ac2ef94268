"""The learning lab's figures (benchmarks/learning.py): outcomes paired over every
evaluated task, the gain with its interval and McNemar's p, and the experiment's row
appended to the lake's `experiments` table and listed by `tandem query`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from benchmarks.learning import gain_figures, paired_outcomes, record_experiment, sft_arm_figures, split_figures
from flows.cli import app
from storage import shards
from storage.fs import open_store
from tests.storage.conftest import make_episodes


def evaluation(solved: list[str], tasks: int, first: float = 0.0) -> dict:
    return {"pass@1": len(solved) / tasks, "first_attempt_pass@1": first, "solved": solved, "tasks": tasks}


def test_tasks_neither_evaluation_solved_are_paired_as_failures() -> None:
    before, after = paired_outcomes(evaluation(["a", "b"], 6), evaluation(["b", "c", "d"], 6))
    assert len(before) == len(after) == 6
    assert sum(before) == 2 and sum(after) == 3
    assert sum(x and not y for x, y in zip(before, after)) == 1  # a: lost
    assert sum(y and not x for x, y in zip(before, after)) == 2  # c, d: gained


def test_the_figures_hold_the_gain_its_interval_and_the_p_value() -> None:
    before = evaluation([f"t{i}" for i in range(10)], 100, first=0.05)
    after = evaluation([f"t{i}" for i in range(5, 25)], 100, first=0.12)
    figures = gain_figures(before, after)
    assert figures["gain_points"] == 10.0
    low, high = figures["gain_interval_points"]
    assert low < 10.0 < high and low > 0  # 15 gained, 5 lost of 100
    assert figures["p_value"] < 0.05
    assert (figures["first_attempt_before"], figures["first_attempt_after"]) == (0.05, 0.12)
    assert figures["heldout_tasks"] == 100


def test_an_sft_arm_reports_its_gain_over_the_warm_start_under_its_own_keys() -> None:
    before = evaluation([f"t{i}" for i in range(10)], 100)
    arm = {"eval": evaluation([f"t{i}" for i in range(4)], 100, first=0.03), "seconds": 301.26}
    figures = sft_arm_figures(before, arm, "oracle_sft_points", "oracle_sft")
    assert figures["oracle_sft_points"] == -6.0 and figures["pass_at_1_oracle_sft"] == 0.04
    assert figures["first_attempt_oracle_sft"] == 0.03 and figures["oracle_sft_train_s"] == 301.3
    assert 0 < figures["p_value_oracle_sft"] < 0.05  # 6 lost, none gained


def test_a_corpus_run_reports_held_out_projects_and_held_out_tasks_apart() -> None:
    groups = {"heldout_projects": [f"p{i}" for i in range(20)], "heldout_tasks": [f"t{i}" for i in range(10)]}
    before = evaluation(["t0", "t1", "t2", "p0"], 30)
    after = evaluation(["t0", "t1", "p0", "p1", "p2", "p3", "p4"], 30)
    by_split = split_figures(before, after, {**groups, "empty": []})
    assert set(by_split) == {"heldout_projects", "heldout_tasks"}  # a group with no task is left out
    projects, tasks = by_split["heldout_projects"], by_split["heldout_tasks"]
    assert (projects["tasks"], projects["pass_at_1_before"], projects["pass_at_1_after"]) == (20, 0.05, 0.25)
    assert projects["gain_points"] == 20.0 and projects["p_value"] == 0.125  # 4 gained, none lost: 2 / 2**4
    assert tasks["gain_points"] == -10.0 and tasks["gain_interval_points"][0] < 0
    # An SFT arm's gain on a corpus is the held-out projects' too.
    arm = {"eval": evaluation(["p0", "p1", "t5"], 30), "seconds": 10.0}
    figures = sft_arm_figures(before, arm, "sft_gain_points", "sft", groups["heldout_projects"])
    assert figures["sft_gain_points"] == 5.0 and figures["pass_at_1_sft"] == 0.1


def test_each_experiment_appends_a_row_listed_with_and_without_a_run(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    shards.write_shard(open_store(root), "some-run", 0, "final", make_episodes("some-run", 0, 2))
    figures = gain_figures(evaluation(["a"], 10), evaluation(["a", "b"], 10))
    for name in ("lr-5e-4", "lr-1e-4"):
        record_experiment(root, name, {"mode": "quick"}, figures, datetime.now(UTC), 612.3)
    sql = "SELECT name, settings->>'mode', figures->>'gain_points', wall_s FROM experiments ORDER BY name"
    for extra in ([], ["--run", "some-run"]):
        result = CliRunner().invoke(app, ["query", sql, "--root", root, "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        rows = [list(r.values()) for r in json.loads(result.stdout)]
        assert rows == [["lr-1e-4", "quick", "10.0", 612.3], ["lr-5e-4", "quick", "10.0", 612.3]]
