"""A 2-step `tandem run` on tasks from real projects with the tiny model and no model.path:
the run builds its corpus first (`tasks.build`: tinydb's pinned sdist for training, a
small project folder held out whole), draws its tasks with the function hint,
warm-starts on the repository candidate demonstrator (its verdicts from tinydb's own
tests in the sandbox), serves the warm start on vLLM with a 2,048-token context, plays
episodes in the repository protocol (kept feedback), trains two steps and evaluates
the held-out project before and after: `configs/repos.toml` itself, as its trial
(tests/flows/recipe_trial.py) scales it down, so this is also that recipe's first-steps test."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.env.task_sources.corpus import load_corpus
from engines.env.task_sources.splits import heldout_kind
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect
from tests.flows.recipe_trial import to_toml, trial
from tests.flows.tandem_cli import run_tandem
from tests.real_project import write_project

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox]


def _config(root: Path, corpus: Path, held_out: Path) -> str:
    """configs/repos.toml's trial (tests/flows/recipe_trial.py), its corpus built from tinydb
    for training and `held_out` held out whole instead of the recipe's ten projects."""
    data = trial("repos", str(root))
    data["tasks"]["corpus_path"] = str(corpus)
    data["tasks"]["build"] = {
        "projects": ["tinydb", str(held_out)],
        "tasks_per_project": 3,
        "max_mutants_per_project": 24,
        "heldout_projects": [held_out.name],
        "heldout_fraction": 0.0,
    }
    return to_toml(data)


def test_a_two_step_run_builds_its_corpus_and_reaches_v2(tmp_path: Path, prefect_server: dict[str, str]) -> None:
    held_out = write_project(tmp_path / "shop")
    root, config, corpus = tmp_path / "lake", tmp_path / "repos.toml", tmp_path / "corpus"
    config.write_text(_config(root, corpus, held_out))
    output = run_tandem(config, prefect_server)
    assert "[tandem] run repos finished" in output and "(hint: function)" in output
    built = load_corpus(corpus)
    assert {t.repo for t in built if t.split == "train"} == {"tinydb"}
    assert {(t.repo, heldout_kind(t)) for t in built if t.split == "heldout"} == {("shop", "project")}
    assert "pass@1 on held-out projects before / after (1 tasks)" in output
    store = open_store(str(root))
    assert checkpoints.latest(store, "repos").version == 2
    lake = connect(store, run="repos")
    assert lake.sql("SELECT count(*) FROM steps").fetchall()[0][0] == 2
    rows = lake.sql("SELECT conversation, finish_reason FROM rollouts").fetchall()
    assert len(rows) == 8 and all(reason != "error" for _, reason in rows)
    assert all("The bug is in " in conversation for conversation, _ in rows)  # the hint reached every prompt
    evaluated = lake.sql("SELECT count(*) FROM evaluations").fetchall()[0][0]
    assert evaluated >= 2  # the held-out task, before and after
