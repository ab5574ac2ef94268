from typer.testing import CliRunner

from engines.env.task_sources.corpus import load_corpus
from flows.tasks_cli import app


def test_build_micro_corpus_prints_counts_and_reads_back(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "build",
            "--out",
            str(tmp_path / "c"),
            "--no-default-projects",
            "--micro-train",
            "20",
            "--micro-heldout",
            "5",
            "--jsonl",
            str(tmp_path / "c.jsonl"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "micro" in result.output and "total 25 tasks (5 held out)" in result.output
    assert len(load_corpus(tmp_path / "c")) == 25 and (tmp_path / "c.jsonl").read_text().count("\n") == 25


def test_build_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(app, ["build", "--out", str(tmp_path / "c"), "-p", "toolz==1.2.0"])
    assert result.exit_code == 1 and result.output.strip().startswith("error:") and "sha256" in result.output
