"""Replays of a finished run through `tandem replay`: re-grading its stored patches
agrees with its stored rewards on every episode, re-training leaves it byte-identical
and the new runs record where their data came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.corpus import run_tasks
from engines.rollout.rescore import agreement, rescore_episodes
from engines.rollout.step import GradeCache
from storage import checkpoints, shards
from storage.fs import open_store
from storage.query import connect
from tests.flows.finished_runs import graded_run, trained_on_run, tree_digest

REPO = Path(__file__).resolve().parents[2]


def tandem(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, int]:
    """A finished run 'src' of graded micro-task episodes: (lake root, corpus, episodes)."""
    base = tmp_path_factory.mktemp("graded")
    root, corpus = str(base / "lake"), base / "corpus"
    return root, corpus, graded_run(root, "src", corpus)


@pytest.mark.sandbox
@pytest.mark.prefect
def test_rescore_agrees_with_stored_rewards_on_every_episode(graded, prefect_server) -> None:
    root, _, episodes = graded
    before = tree_digest(Path(root) / "src")
    done = tandem(
        prefect_server, "replay", "rescore", "--source_run", "src", "--run", "src-regraded", "--storage.root", root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{episodes}/{episodes} episodes of src agree with the stored rewards (100.0%)" in done.stdout
    lake = connect(open_store(root), "src-regraded")
    rows = lake.sql(
        "SELECT count(*), count(*) FILTER (agrees), count(DISTINCT reward), min(source_run) FROM rescores"
    ).fetchall()
    assert rows == [(episodes, episodes, 2, "src")]  # rewards 0 and 1 both occur, and agree
    ((kind, source, steps, corpus),) = lake.sql("SELECT kind, source_run, source_steps, corpus_id FROM runs").fetchall()
    assert (kind, source, steps) == ("rescore", "src", [0, 1]) and corpus.startswith("sha256:")
    assert tree_digest(Path(root) / "src") == before


@pytest.mark.sandbox
def test_a_changed_stored_reward_is_reported_as_a_disagreement(graded) -> None:
    root, corpus, _ = graded
    store = open_store(root)
    stored = shards.read_step(store, "src", 0)
    flipped = stored.column("reward").to_pylist()
    flipped[0] = 1.0 - flipped[0]
    stored = stored.set_column(stored.schema.get_field_index("reward"), "reward", [flipped])
    tasks = {t.instance_id: t for t in run_tasks(store, "src", str(corpus))}
    with GradingPool(EnvConfig(workers=2)) as grader:
        table = rescore_episodes(grader, GradeCache(), tasks, stored, "check", "src", 0)
    a = agreement(table)
    assert (a.graded, a.agree) == (stored.num_rows, stored.num_rows - 1)
    assert table.column("agrees").to_pylist()[0] is False


@pytest.mark.slow
@pytest.mark.prefect
def test_replay_train_leaves_the_source_byte_identical(tmp_path, prefect_server, tiny_model_dir) -> None:
    from engines.model.load import load_moe_causal_lm

    root = str(tmp_path / "lake")
    torch.manual_seed(0)
    trained_on_run(
        root, "src", load_moe_causal_lm(tiny_model_dir), tiny_model_dir, 2, "--trainer.std_scale_advantages", "true"
    )
    before = tree_digest(Path(root) / "src")
    done = tandem(
        prefect_server,
        "replay",
        "train",
        "--source_run",
        "src",
        "--run",
        "src-lr",
        "--storage.root",
        root,
        "--trainer.lr",
        "1e-3",
        "--trainer.micro_batch_rows",
        "8",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained on 2 steps of src, published versions [1, 2]" in done.stdout
    assert tree_digest(Path(root) / "src") == before

    store = open_store(root)
    assert checkpoints.list_versions(store, "src-lr") == [1, 2] and checkpoints.list_versions(store, "src") == [0]
    lake = connect(store, "src-lr")
    assert lake.sql("SELECT step FROM steps ORDER BY step").fetchall() == [(0,), (1,)]
    ((kind, source, steps, config),) = lake.sql("SELECT kind, source_run, source_steps, config FROM runs").fetchall()
    assert (kind, source, steps) == ("replay-train", "src", [0, 1])
    trainer = json.loads(config)["trainer"]
    # set here: lr; from the source's stored config: std_scale_advantages
    assert trainer["lr"] == 1e-3 and trainer["std_scale_advantages"] is True and trainer["micro_batch_rows"] == 8
    assert json.loads(config)["model_path"] == checkpoints.get(store, "src", 0).uri
    v2 = load_file(f"{checkpoints.get(store, 'src-lr', 2).uri}/model.safetensors")
    v0 = load_file(f"{tiny_model_dir}/model.safetensors")
    assert any(not torch.equal(v2[k], v0[k]) for k in v0)


def test_each_replay_has_a_deployment_whose_flow_loads() -> None:
    import yaml
    from prefect.flows import load_flow_from_entrypoint

    deployments = {d["entrypoint"]: d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
    for entrypoint, name in (
        ("flows/replay.py:replay_rescore", "replay-rescore"),
        ("flows/replay.py:replay_train", "replay-train"),
    ):
        assert entrypoint in deployments, f"prefect.yaml has no deployment of {entrypoint}"
        flow = load_flow_from_entrypoint(str(REPO / entrypoint))
        assert flow.name == name and "config" in flow.parameters.properties


def test_replay_train_refuses_warm_start_settings() -> None:
    from flows.replay_config import ReplayTrainConfig

    with pytest.raises(ValueError, match=r"trainer\.sft: a replay .* makes no warm start"):
        ReplayTrainConfig(source_run="src", trainer={"sft": {"max_steps": 10}})
    assert ReplayTrainConfig(source_run="src", trainer={"lr": 1e-3}).trainer.lr == 1e-3
