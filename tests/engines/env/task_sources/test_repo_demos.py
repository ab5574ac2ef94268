"""The candidate demonstrator on real-shaped tasks (tests/real_project.py): its plausible
fixes are the builder's mutation kinds in the buggy function (the fix among them), and
a demonstration shows exactly what a session shows when its turns are replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.env.config import EnvConfig
from engines.env.edits import line_tokens
from engines.env.grader import GradingPool
from engines.env.session import EnvSession
from engines.env.task_sources.repo_demos import demonstrable_share, plan, pool_tester, repo_demonstrations, source_texts
from engines.env.task_sources.selection import with_hint
from engines.protocol import render_action
from tests.real_project import SOURCE, one_bug_task, two_edit_task, write_project

pytestmark = [pytest.mark.corpus, pytest.mark.sandbox]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("shop"))


def test_the_fix_is_one_of_the_candidates_in_the_named_function(project: Path) -> None:
    task = one_bug_task(project)
    found = plan(task)
    assert found is not None and found.scope.qualname == "Prices.total" and found.path == SOURCE
    texts = {c.text.strip() for c in found.candidates}
    assert "return sum(self.get(n) * stock.get(n) for n in stock.items)" in texts  # the fix
    assert (found.fix.action.scope, found.fix.action.old, found.fix.action.new) == ("Prices.total", ") //", ") *")
    assert all(found.scope.first <= c.line <= found.scope.last for c in found.candidates)
    assert plan(two_edit_task(project)) is None  # a two-line fix is no single candidate
    assert demonstrable_share([task, two_edit_task(project)]) == 0.5
    assert any("class Prices" in text for text in source_texts([task]))


def test_old_tokens_widens_each_candidates_old_to_hold_the_lines_names(project: Path) -> None:
    task = one_bug_task(project)
    short, wide = plan(task), plan(task, old_tokens=6)
    assert (short.fix.action.old, short.fix.action.new) == (") //", ") *")  # the mutation's shape alone
    assert (wide.fix.action.scope, wide.fix.action.old, wide.fix.action.new) == (
        "Prices.total",
        ".get(n) //",
        ".get(n) *",
    )
    for narrow, widened in zip(short.candidates, wide.candidates):
        old = widened.action.old
        assert narrow.action.old.strip() in old and old in wide.lines[widened.line - 1]
        line = wide.lines[widened.line - 1]
        inside = [t for t in line_tokens(line) if line.index(old) <= t[1] and t[2] <= line.index(old) + len(old)]
        assert len(inside) >= min(6, len(line_tokens(line)))
        assert widened.patch == narrow.patch  # the same rewrite, written with more of its line


def test_a_demonstration_shows_what_a_session_shows(project: Path, env_config: EnvConfig, tmp_path: Path) -> None:
    """Replayed in a session with the same tester, every assistant turn of a demonstration gets
    the observation the demonstration holds; the last edit ends it when it is the fix."""
    task = with_hint(one_bug_task(project), "function")
    config = env_config.model_copy(update={"edit_attempts": 3, "feedback": "keep", "scratch_dir": str(tmp_path)})
    with GradingPool(config) as pool:
        demos = [repo_demonstrations([task], 3, seed, pool_tester(pool), config.view_lines)[0] for seed in range(4)]
        several = repo_demonstrations([task], 3, 0, pool_tester(pool), config.view_lines, per_task=4)
        assert len(several) == 4 and len({str(d) for d in several}) > 1  # each its own order
        for demo in demos:
            assert demo[0] == {"role": "user", "content": task.problem_statement}
            assert demo[1]["content"] == f"view {SOURCE} Prices.total"
            with EnvSession.open(
                task, config, tester=lambda t, tree: pool.grade_many([(t, tree.diff())], fast=True)[0]
            ) as s:
                for turn, reply in zip(demo[1::2], demo[2::2]):
                    assert s.step(turn["content"]).observation == reply["content"]
                last = s.step(demo[-1]["content"])
                assert last.done == (demo[-1]["content"] != "undo")
    fix = render_action(plan(task).fix.action)
    assert any(d[-1]["content"] == fix for d in demos)  # some order reaches the fix within three attempts
    assert any(m["content"] == "undo" for d in demos for m in d)  # and some try a wrong candidate first
