"""The terminal's closing lines of `tandem run`: the last one carries the gain, the
paired McNemar p in scientific notation and the verdict."""

from __future__ import annotations

from flows.comparison import format_p
from flows.run_cli import final_lines

SUMMARY = {
    "pass@1 before RL (warm start)": 0.188,
    "pass@1 after RL": 0.358,
    "pass@1 gain (points)": 17.0,
    "tasks newly solved / lost": "95 / 10",
    "p-value (exact McNemar, paired)": 3.9e-14,
    "verdict": "RL gained 17.0 points of held-out greedy pass@1, significant at p < 0.01",
    "pass@1 on held-out projects before / after (40 tasks)": "0.100 / 0.150",
    "p-value on held-out projects (exact McNemar, paired)": 0.0625,
    "wall minutes": 22.4,
}


def test_p_values_read_in_scientific_notation():
    assert format_p(3.9e-14) == "3.90e-14"
    assert format_p(1.0) == "1.00e+00"
    assert format_p(0.0) == "0.00e+00"


def test_the_last_line_carries_the_p_value_and_the_verdict():
    lines = final_lines("exp1", SUMMARY)
    assert lines[-1] == (
        "[tandem] run exp1 finished in 22.4 min: pass@1 0.188 -> 0.358 (+17.0 points); "
        "paired McNemar p 3.90e-14: RL gained 17.0 points of held-out greedy pass@1, significant at p < 0.01"
    )
    assert lines[:-1] == [
        "[tandem]   pass@1 on held-out projects before / after (40 tasks): 0.100 / 0.150",
        "[tandem]   p-value on held-out projects (exact McNemar, paired): 6.25e-02",
    ]


def test_without_solved_ids_the_last_line_has_no_p_value():
    summary = {k: v for k, v in SUMMARY.items() if not k.startswith(("p-value", "verdict", "pass@1 on"))}
    assert final_lines("exp1", summary) == [
        "[tandem] run exp1 finished in 22.4 min: pass@1 0.188 -> 0.358 (+17.0 points)"
    ]
