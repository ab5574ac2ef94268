"""A 2-step `tandem run` on tasks from real projects with the tiny model and no model.path:
the run builds its corpus first (`tasks.build`: tinydb's pinned sdist for training, a
small project folder held out whole), draws its tasks with the function hint,
warm-starts on the repository candidate demonstrator (its verdicts from tinydb's own
tests in the sandbox), serves the warm start on vLLM with a 2,048-token context, plays
episodes in the repository protocol (kept feedback), trains two steps and evaluates
the held-out project before and after. The path `configs/repos.toml` takes, scaled down."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.env.corpus import load_corpus
from engines.env.splits import heldout_kind
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect
from tests.flows.tandem_cli import run_tandem
from tests.real_project import write_project

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.prefect, pytest.mark.vllm, pytest.mark.sandbox]


def _config(root: Path, corpus: Path, held_out: Path) -> str:
    return f"""
run = "repos"
[storage]
root = "{root}"
[model.tiny]
max_position_embeddings = 2048
[tasks]
kind = "corpus"
corpus_path = "{corpus}"
heldout_tasks = 1
hint = "function"
[tasks.build]
projects = ["tinydb", "{held_out}"]
tasks_per_project = 3
max_mutants_per_project = 24
heldout_projects = ["{held_out.name}"]
heldout_fraction = 0.0
[env]
edit_attempts = 2
feedback = "keep"
view_lines = 30
workers = 2
[inference]
max_model_len = 2048
kv_cache_gb = 1.0
max_num_seqs = 16
concurrency_per_server = 16
[inference.sampling]
max_tokens_per_turn = 48
[inference.limits]
max_turns = 4
max_total_tokens = 2048
max_observation_tokens = 512
max_concurrent_episodes = 16
[trainer]
seq_len = 2048
packing = true
micro_batch_rows = 2
[trainer.sft]
max_steps = 4
batch_size = 4
[rl]
steps = 2
batch_size = 8
group_size = 4
async_level = 1
[eval]
tasks = 1
samples = 1
"""


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
    rows = lake.sql("SELECT conversation, finish_reason FROM rollouts").fetchall()
    assert len(rows) == 16 and all(reason != "error" for _, reason in rows)
    assert all("The bug is in " in conversation for conversation, _ in rows)  # the hint reached every prompt
    evaluated = lake.sql("SELECT count(*) FROM evaluations").fetchall()[0][0]
    assert evaluated >= 2  # the held-out task, before and after
