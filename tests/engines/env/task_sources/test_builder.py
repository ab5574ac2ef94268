"""The real-repository builder on one small project (sdist cached after the first download)."""

import json

import pytest

from engines.env.errors import BuildError
from engines.env.grader import GradingPool
from engines.env.task_sources.builder import _batches, _runnable, discover, mutant_timeout, stop_after
from engines.env.task_sources.corpus import load_corpus
from engines.env.task_sources.mutations import Mutation, function_starts
from engines.env.task_sources.sdists import DEFAULT_PINS, SdistPin, _cached_archives


@pytest.mark.slow
@pytest.mark.sandbox
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
        assert meta["function"] and meta["function"].split(".")[-1].isidentifier()  # e.g. Table.search
        assert meta["failing_output"].splitlines()[0] in task.problem_statement  # the statement may be cut
        assert (task.split == "heldout") == (meta.get("heldout") in ("project", "task"))
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


def test_default_pins_are_many_distinct_and_keep_the_first_six():
    names = [p.name for p in DEFAULT_PINS]
    assert len(names) >= 16 and len(set(names)) == len(names)
    assert names[:6] == ["toolz", "funcy", "cachetools", "tinydb", "voluptuous", "xmltodict"]
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in DEFAULT_PINS)


def test_cached_sdists_are_found_under_their_normalised_name(tmp_path):
    pin = SdistPin("python-slugify", "9.2.0", "0" * 64)
    (tmp_path / "python_slugify-9.2.0.tar.gz").write_bytes(b"x")
    (tmp_path / "python_slugify-9.2.1.tar.gz").write_bytes(b"x")
    assert [p.name for p in _cached_archives(tmp_path, pin)] == ["python_slugify-9.2.0.tar.gz"]


def test_mutant_runs_stop_early_only_past_what_a_task_may_break():
    assert stop_after(max_f2p=20, tests_seen=515, stable=507) == 29  # 8 unstable tests may fail as well
    assert stop_after(max_f2p=1, tests_seen=10, stable=10) == 2
    assert mutant_timeout(0.5) == 10.0 and mutant_timeout(6.0) == 24.0


SOURCE = """def called(x):
    return x + 1


@staticmethod
def never(x):
    def inner(y):
        return y - 1
    return inner(x) * 2
"""


def test_mutants_of_functions_the_suite_never_calls_are_not_run():
    starts = function_starts(SOURCE)
    assert starts[1] == 1 and starts[2] is None and starts[5] == 5 and starts[6:9] == [7, 7, 5]  # index = line - 1
    m = lambda line: Mutation("constant", line, 0, 0, "")  # noqa: E731
    candidates = [("a.py", m(2)), ("a.py", m(8)), ("a.py", m(9)), ("b.py", m(1)), ("a.py", m(2))]
    runs = _runnable(candidates, {("a.py", 1), ("a.py", 7)}, {"a.py": starts})
    assert [run for *_, run in runs] == [True, True, False, True, True]  # b.py: not traced, run
    assert [run for *_, run in _runnable(candidates, None, {"a.py": starts})] == [True] * 5
    batches = list(_batches(runs, 2))
    assert [([mm.line for _, mm in b], skipped) for b, skipped in batches] == [([2, 8], 0), ([1, 2], 1)]
    tail = list(_batches([("a.py", m(2), True), ("a.py", m(9), False)], 4))
    assert [(len(b), skipped) for b, skipped in tail] == [(1, 1)]
    assert list(_batches([("a.py", m(9), False)], 4)) == [([], 1)]
