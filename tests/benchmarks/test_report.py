"""The experiments table as markdown (benchmarks/report.py): one table per name, the
settings that tell the rows apart, every figure, p-values in scientific notation, from
rows appended to a lake as the learning lab appends them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from benchmarks.report import flatten, main
from storage import tables
from storage.fs import open_store

START = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)


def _row(name: str, lr: float, gain: float, p: float, minutes: int) -> dict:
    settings = {"mode": "quick", "run": {"rl": {"lr": lr, "steps": 10}, "model": {"tiny": True}}}
    figures = {"pass_at_1_before": 0.5, "gain_points": gain, "gain_interval_points": [-1.5, 3.0], "p_value": p}
    return {
        "name": name,
        "settings": json.dumps(settings),
        "figures": json.dumps(figures),
        "code_version": "git:abc1234",
        "started_at": START + timedelta(minutes=minutes),
        "wall_s": 600.0,
    }


def test_each_name_is_a_table_whose_rows_differ_by_their_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = open_store(str(tmp_path / "lake"))
    for row in (
        _row("rl-lr", 1e-4, -2.5, 0.23, 5),
        _row("rl-lr", 3e-5, 17.0, 1.05e-13, 0),
        _row("gate", 1e-4, 4.0, 0.5, 9),
    ):
        tables.append_experiment(store, row)
    assert main(["--root", str(tmp_path / "lake")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == {"report": "experiments", "rows": 3, "names": 2}
    text = "\n".join(out)
    assert text.index("### gate") < text.index("### rl-lr")
    table = text.split("### rl-lr", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| 2026")]
    assert rows[0].startswith("| 2026-12-06 01:00 | git:abc1234 | 10.0 min | run.rl.lr=3e-05 |")  # oldest first
    assert "| 17 | [-1.5, 3] | 1.05e-13 |" in rows[0] and "| 0.23 |" in rows[1]
    assert "Shared by every row" in table
    assert main(["--root", str(tmp_path / "lake"), "--name", "gate"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"] == 1


def test_settings_flatten_to_dotted_keys() -> None:
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": 1, "a.c": [1, 2], "d": "x"}
