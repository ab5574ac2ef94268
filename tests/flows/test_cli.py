"""`tandem query`: output in each format, root selection, and errors as one line on
stderr with a non-zero exit, on local disk and on S3."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage import shards
from storage.fs import open_store
from tests.storage.conftest import make_episodes

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def fill(root: str) -> None:
    store = open_store(root)
    for run, steps in (("alpha", 2), ("beta", 1)):
        for step in range(steps):
            shards.write_shard(store, run, step, "w0", make_episodes(run, step, 4, seed=step))


@pytest.fixture
def lake(tmp_path: Path) -> str:
    root = str(tmp_path / "lake")
    fill(root)
    return root


def tandem(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_table_output_over_one_run(lake: str) -> None:
    result = tandem(
        "query",
        "SELECT step, count(*) AS n FROM rollouts GROUP BY step ORDER BY step",
        "--run",
        "alpha",
        "--root",
        lake,
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "step" in lines[1] and "n" in lines[1] and "int64" in lines[2]
    assert [line.split()[1:4:2] for line in lines[4:6]] == [["0", "4"], ["1", "4"]]
    assert len(lines) == 7 and result.stderr == ""


def test_csv_output_over_all_runs(lake: str) -> None:
    result = tandem(
        "query",
        "SELECT run_id, count(*) AS n, list(sample_index ORDER BY sample_index) AS ids FROM rollouts GROUP BY run_id ORDER BY run_id",
        "--root",
        lake,
        "--format",
        "csv",
    )
    assert result.exit_code == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows == [["run_id", "n", "ids"], ["alpha", "8", "[0, 0, 1, 1, 2, 2, 3, 3]"], ["beta", "4", "[0, 1, 2, 3]"]]


def test_json_output_writes_blobs_and_timestamps(lake: str) -> None:
    sql = "SELECT sample_index, routed_experts, started_at, completion_logprobs FROM rollouts WHERE step = 0 ORDER BY sample_index LIMIT 2"
    result = tandem("query", sql, "--run", "beta", "--root", lake, "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    episodes = make_episodes("beta", 0, 4, seed=0).to_pylist()
    assert [r["sample_index"] for r in rows] == [0, 1]
    assert rows[0]["routed_experts"] == episodes[0]["routed_experts"].hex()
    assert rows[1]["started_at"] == episodes[1]["started_at"].isoformat()
    assert len(rows[0]["completion_logprobs"]) == len(episodes[0]["completion_logprobs"])


def test_the_root_comes_from_tandem_root_then_defaults_to_runs(
    lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tandem("query", "SELECT count(*) FROM rollouts", "--format", "csv", env={"TANDEM_ROOT": lake})
    assert result.stdout.splitlines()[1] == "12"
    monkeypatch.chdir(tmp_path)
    fill(str(tmp_path / "runs"))
    (tmp_path / "runs/beta/rollouts/step=0/w0.parquet").unlink()
    result = tandem("query", "SELECT count(*) FROM rollouts", "--format", "csv", env={"TANDEM_ROOT": None})
    assert result.stdout.splitlines()[1] == "8"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["SELECT 1", "--run", "gamma"], "error: run 'gamma' not found under {root}; runs there: alpha, beta"),
        (["SELEC step FROM rollouts"], 'error: Parser Error: syntax error at or near "SELEC"'),
        (["SELECT nope FROM rollouts"], 'error: Binder Error: Referenced column "nope" not found'),
        (["SELECT * FROM episodes"], "error: Catalog Error: Table with name episodes does not exist"),
        (["SELECT 1", "--run", "../etc"], "error: run name '../etc' is not allowed"),
    ],
)
def test_errors_are_one_line_on_stderr(lake: str, args: list[str], message: str) -> None:
    result = tandem("query", *args, "--root", lake)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(message.format(root=lake))
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_corrupt_file_is_a_warning_and_the_rest_is_answered(lake: str) -> None:
    Path(lake, "alpha/rollouts/step=1/w0.parquet").write_bytes(b"PAR1 truncated")
    result = tandem("query", "SELECT count(*) FROM rollouts", "--root", lake, "--format", "csv")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["count_star()", "8"]
    assert result.stderr.startswith(f"warning: left out {lake}/alpha/rollouts/step=1/w0.parquet: ")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.s3
def test_the_console_command_queries_s3(s3_server: dict[str, str], s3_bucket: str) -> None:
    root = f"s3://{s3_bucket}/lake"
    fill(root)
    env = {**os.environ, **s3_server, "TANDEM_ROOT": root, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "flows.cli", "query"]
    done = subprocess.run(
        [
            *command,
            "SELECT run_id, sum(reward) >= 0 AS ok, count(*) AS n FROM rollouts GROUP BY 1 ORDER BY 1",
            "--format",
            "csv",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["run_id,ok,n", "alpha,True,8", "beta,True,4"]

    done = subprocess.run(
        [*command, "SELECT 1", "--run", "gamma"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr == f"error: run 'gamma' not found under {root}; runs there: alpha, beta\n"
