"""Every recipe of configs/ runs its first two RL steps on this CPU through the real loop
(`tandem run`: the suite's Prefect server, a vLLM CPU server, sandboxed grading, the
trainer lane, weights published to v2), as tests/flows/recipe_trial.py makes it: the
tiny test model of its family, cluster settings off, 2 steps of 4 episodes, on three
tinydb tasks; the corpus and Qwen3 recipes run at once, on the same Prefect server.
The models' weights are random, so every reward is zero and the trainer
skips its optimizer steps (no trainable tokens); versions are still published and served.

configs/glm5-multinode.toml's trial runs the GLM-4.5 model with its lake on the suite's
S3 server (GLM-5's architecture is refused by the CPU build), reached through a proxy
that goes down for OUTAGE_S once v1 is out: the lanes wait the outage out, say so,
and the run completes with every step and episode once.

Two recipes run in other modules, so the suite holds one run of each, not two:
- configs/repos.toml: tests/flows/test_corpus_run.py (its trial, building its own corpus);
- configs/tiny.toml: tests/flows/test_run_faults.py (the recipe to v6 through three kills).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engines.inference.config import ClusterOptions
from flows.config import RunConfig
from flows.config_loader import load_config
from storage import checkpoints
from storage.fs import open_store
from storage.query import connect
from tests.chat_models import build_chat_model
from tests.flows.recipe_trial import FAMILY, RECIPES, merge, to_toml, trial, widen_positions
from tests.flows.tandem_cli import run_tandem, run_tandems
from tests.storage.outage_proxy import OutageProxy

# How each family's template opens a conversation with a system message.
OPENING = {"olmoe": "<|endoftext|><|system|>\n", "qwen3": "<|im_start|>system\n", "glm": "[gMASK]<sop><|system|>\n"}
OUTAGE_S = 30.0  # the S3 endpoint gone mid-run (the 30-60 s)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three tinydb tasks (the corpus cache's, as `real_corpus`), one held out for evaluation."""
    from engines.env.config import EnvConfig
    from engines.env.task_sources.builder import BuildConfig, build_corpus

    out = tmp_path_factory.mktemp("trial-corpus")
    env = EnvConfig(workers=2, scratch_dir=str(out / "scratch"))
    config = BuildConfig(
        projects=["tinydb"],
        tasks_per_project=3,
        max_mutants_per_project=24,
        baseline_runs=2,
        heldout_fraction=0.5,
        env=env,
    )
    tasks, _ = build_corpus(config, out)
    assert {t.split for t in tasks} == {"train", "heldout"}, [t.split for t in tasks]
    return out


def _trial_file(name: str, root: str, tmp: Path, corpus: Path, overlay: dict[str, Any] | None = None) -> Path:
    """The recipe's trial configuration, with its family's test model built under `tmp`
    (and `overlay`'s keys set over it)."""
    family = FAMILY[name]
    model = widen_positions(build_chat_model(family, tmp / family)) if family else None
    path = tmp / f"{name}.toml"
    path.write_text(to_toml(merge(trial(name, root, model, corpus), overlay or {})))
    return path


def _check_two_steps(output: str, root: str, run: str) -> None:
    """Finished at v2 with 2 steps of 4 episodes, every episode in its family's template."""
    assert f"[tandem] run {run} finished" in output
    store = open_store(root)
    assert checkpoints.latest(store, run).version == 2
    lake = connect(store, run=run)
    assert lake.sql("SELECT count(*) FROM steps").fetchall()[0][0] == 2
    episodes = lake.sql("SELECT conversation, finish_reason FROM rollouts").fetchall()
    assert len(episodes) == 8 and all(reason != "error" for _, reason in episodes)
    start = OPENING[FAMILY[run]]
    assert all(conversation.startswith(start) for conversation, _ in episodes), episodes[0][0][:80]


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_recipe_has_a_trial_this_machine_accepts(path: Path, tmp_path: Path) -> None:
    name = path.stem
    assert name in FAMILY, f"configs/{path.name}: name its family's test model in recipe_trial.FAMILY"
    model = tmp_path / "model" if FAMILY[name] else None
    if model is not None:
        model.mkdir()
    config = tmp_path / "trial.toml"
    config.write_text(to_toml(trial(name, str(tmp_path / "lake"), model, tmp_path / "corpus")))
    loaded = load_config(RunConfig, config, [])
    assert loaded.rl.steps == 2 and loaded.inference.cluster == ClusterOptions()
    assert loaded.trainer.processes == 1 and loaded.trainer.context_parallel_size == 1
    assert loaded.trainer.export_format != "fp8" and loaded.trainer.router_replay != "on"


@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.prefect
@pytest.mark.vllm
@pytest.mark.sandbox
@pytest.mark.corpus
def test_two_recipes_reach_v2_at_once_on_one_prefect_server(
    corpus: Path, tmp_path: Path, prefect_server: dict[str, str]
) -> None:
    """The corpus and Qwen3 recipes, started together, each with its own lanes and lake,
    both finish at v2 while this test holds every slot of a server-wide training and
    rollout limit (the names all runs shared before): a run takes only its own limits
    (tasks/limits.py), so no run waits for another."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    names = ("corpus", "qwen3-30b-a3b-8gpu")
    roots = {name: str(tmp_path / name / "lake") for name in names}
    for name in names:
        (tmp_path / name).mkdir()
    configs = [_trial_file(name, roots[name], tmp_path / name, corpus) for name in names]
    shared = ("tandem-training", "tandem-rollout")
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            for limit in shared:
                client.upsert_global_concurrency_limit_by_name(limit, 1)
            held = client.increment_concurrency_slots_with_lease(
                names=list(shared), slots=1, mode="concurrency", lease_duration=900
            ).json()["lease_id"]
        try:
            outputs = run_tandems(configs, prefect_server)
        finally:
            with get_client(sync_client=True) as client:
                client.release_concurrency_slots_with_lease(held)
                limits = {lim.name: lim for lim in client.read_global_concurrency_limits(limit=200)}
    for name, output in zip(names, outputs):
        _check_two_steps(output, roots[name], name)
        for lane in ("tandem-training", "tandem-rollout", "tandem-run"):
            own = limits[f"{lane}:{name}"]
            assert own.limit == 1 and own.active_slots == 0, own


@pytest.mark.s3
@pytest.mark.faults
@pytest.mark.corpus
@pytest.mark.sandbox
@pytest.mark.vllm
@pytest.mark.prefect
@pytest.mark.slow
def test_the_glm5_recipe_reaches_v2_with_its_lake_on_s3_through_an_outage(
    corpus: Path, tmp_path: Path, s3_bucket: str, s3_server: dict[str, str], prefect_server: dict[str, str]
) -> None:
    root, run = f"s3://{s3_bucket}/lake", "glm5-multinode"  # the recipe's lake on the suite's moto server
    outage: dict[str, float] = {}
    with OutageProxy(s3_server["AWS_ENDPOINT_URL"]) as proxy:
        # retries 0: every failed request is the outage handling's, none botocore's own backoff.
        storage = {"storage": {"s3_endpoint_url": proxy.url, "retries": 0, "outage_limit_s": 120.0}}
        config = _trial_file(run, root, tmp_path, corpus, storage)
        watcher = threading.Thread(target=_outage_once_v1_is_out, args=(proxy, root, run, outage), daemon=True)
        watcher.start()
        output = run_tandem(config, prefect_server)
        watcher.join(OUTAGE_S + 5)
    assert outage.get("down_at_version") == 1, outage  # the endpoint went away mid-run, after v1
    assert "is unreachable" in output and "trying again for up to 120 s (storage.outage_limit_s)" in output
    assert "is reachable again" in output, output[-3000:]
    _check_two_steps(output, root, run)


def _outage_once_v1_is_out(proxy: OutageProxy, root: str, run: str, seen: dict[str, float]) -> None:
    """Take the run's S3 endpoint down for OUTAGE_S once v1 is in the lake (read directly)."""
    store, deadline = open_store(root), time.monotonic() + 300
    while time.monotonic() < deadline:
        latest = checkpoints.latest(store, run)
        if latest is not None and latest.version >= 1:
            proxy.down()
            seen["down_at_version"] = latest.version
            time.sleep(OUTAGE_S)
            proxy.up()
            return
        time.sleep(0.2)
