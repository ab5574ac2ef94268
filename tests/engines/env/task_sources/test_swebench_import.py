"""`tandem tasks import`: real SWE-bench-style records (repository + base commit, JSON
string test lists, a test_patch) become gradable tasks, the repository materialised
from a local git clone at the record's commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.corpus import load_corpus
from engines.env.workspace import unified_diff
from flows.tasks_cli import app

BUGGY = "def middle(a, b, c):\n    return sorted([a, b, c])[0]\n\n\ndef double(x):\n    return 2 * x\n"
FIXED = BUGGY.replace("[0]", "[1]")
OLD_TESTS = "from shapes import double\n\n\ndef test_double():\n    assert double(4) == 8\n"
NEW_TESTS = "from shapes import middle\n\n\ndef test_middle():\n    assert middle(3, 1, 2) == 2\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_clone(root: Path) -> tuple[Path, str]:
    repo = root / "shapes-clone"
    (repo / "tests").mkdir(parents=True)
    (repo / "shapes.py").write_text(BUGGY)
    (repo / "tests" / "test_shapes.py").write_text(OLD_TESTS)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "LATER.txt").write_text("a later commit the task must not see\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "later")
    return repo, base


def swebench_record(base: str) -> dict:
    return {  # the fields and encodings of SWE-bench's own JSONL
        "instance_id": "acme__shapes-1",
        "repo": "acme/shapes",
        "base_commit": base,
        "version": "1.0",
        "problem_statement": "middle() returns the smallest value, not the middle one.",
        "patch": unified_diff({"shapes.py": BUGGY.encode()}, {"shapes.py": FIXED.encode()}),
        "test_patch": unified_diff({}, {"tests/test_middle.py": NEW_TESTS.encode()}),
        "FAIL_TO_PASS": json.dumps(["tests/test_middle.py::test_middle"]),
        "PASS_TO_PASS": json.dumps(["tests/test_shapes.py::test_double"]),
        "created_at": "2024-01-01T00:00:00Z",
        "hints_text": "",
        "environment_setup_commit": base,
    }


@pytest.mark.sandbox
def test_records_import_from_a_git_clone_at_their_commit_and_grade(tmp_path: Path) -> None:
    repo, base = make_clone(tmp_path)
    records = tmp_path / "swe.jsonl"
    records.write_text(json.dumps(swebench_record(base)) + "\n")
    out = tmp_path / "corpus"
    result = CliRunner().invoke(app, ["import", str(records), "--out", str(out), "--repo", f"acme/shapes={repo}"])
    assert result.exit_code == 0, result.output
    assert "imported 1 tasks" in result.output
    (task,) = load_corpus(out)
    snapshot = Path(task.snapshot_uri)
    assert (snapshot / "shapes.py").read_text() == BUGGY and not (snapshot / "LATER.txt").exists()
    assert task.FAIL_TO_PASS == ("tests/test_middle.py::test_middle",) and task.base_commit == base
    with GradingPool(EnvConfig(workers=1, scratch_dir=str(tmp_path / "scratch"))) as pool:
        gold, empty = pool.grade_many([(task, task.patch), (task, "")])
    assert gold.resolved and not empty.resolved and not empty.infra_failure, (gold, empty)


def test_a_record_without_a_source_or_with_an_unknown_commit_is_one_line(tmp_path: Path) -> None:
    repo, base = make_clone(tmp_path)
    records = tmp_path / "swe.jsonl"
    records.write_text(json.dumps(swebench_record(base)) + "\n")
    result = CliRunner().invoke(app, ["import", str(records), "--out", str(tmp_path / "c")])
    assert result.exit_code == 1 and "no source for repository 'acme/shapes'" in result.output
    records.write_text(json.dumps(swebench_record("f" * 40)) + "\n")
    result = CliRunner().invoke(
        app, ["import", str(records), "--out", str(tmp_path / "c"), "--repo", f"acme/shapes={repo}"]
    )
    assert result.exit_code == 1 and "has no commit ffff" in result.output
