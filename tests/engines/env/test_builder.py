"""The real-repository builder on one small project (sdist cached after the first download)."""

import json

import pytest

from engines.env.builder import discover
from engines.env.corpus import load_corpus
from engines.env.errors import BuildError
from engines.env.grader import GradingPool
from engines.env.sdists import SdistPin

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_built_tasks_are_valid_and_gold_resolves_while_empty_does_not(real_corpus, env_config):
    tasks = load_corpus(real_corpus)
    assert len(tasks) == 3 and {t.repo for t in tasks} == {"tinydb"}
    for task in tasks:
        assert 1 <= len(task.FAIL_TO_PASS) <= 20 and set(task.FAIL_TO_PASS).isdisjoint(task.PASS_TO_PASS)
        assert task.env_name == "swe" and task.split in ("train", "heldout")
        assert all(f"FAILED {t}" in task.problem_statement for t in task.FAIL_TO_PASS[:2])
        assert task.patch not in task.problem_statement
        meta = json.loads(task.metadata)
        assert meta["bug_patch"] and meta["file"].startswith("tinydb/")
    assert not (real_corpus / "snapshots" / "tinydb-4.9.0" / "tinydb" / "__pycache__").exists()
    config = env_config.model_copy(
        update={
            "limits": env_config.limits.model_copy(update={"wall_timeout_s": 60, "cpu_seconds": 60, "memory_mb": 1024})
        }
    )
    with GradingPool(config) as pool:
        gold = pool.grade_many([(t, t.patch) for t in tasks])
        empty = pool.grade_many([(t, "") for t in tasks])
    assert all(g.resolved for g in gold), gold
    assert not any(e.resolved or e.infra_failure for e in empty), empty


def test_project_without_tests_is_refused_by_name(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n")
    with pytest.raises(BuildError, match="no pytest test files"):
        discover(tmp_path)


def test_pins_are_parsed_or_refused_clearly():
    assert SdistPin.parse("toolz").version == "1.2.0"
    with pytest.raises(BuildError, match="sha256"):
        SdistPin.parse("toolz==1.2.0")
    with pytest.raises(BuildError, match="no default pin"):
        SdistPin.parse("not-a-pinned-project")
