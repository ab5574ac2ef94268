"""`tandem eval` serves a run with the settings it was trained with: the inference and
env sections of the configuration the run stored at its start (the `runs` table), the
caller's explicit keys and machine settings excepted. No server: the rollout lane the
flow opens is a stand-in that records the configuration it was given."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import flows.evaluate as evaluate_flow
from engines.env.task_sources.micro import generate_micro_tasks
from flows.config import RunConfig, RunEnvConfig, RunInferenceConfig
from flows.config_loader import load_config
from flows.evaluate import CALLERS_OWN, explicit_fields, stored_config, with_stored_settings
from flows.provenance import start_record
from storage import checkpoints, runs
from storage.fs import open_store

RUN = "trained"

# What the run was trained with: none of it the default.
STORED = {
    "inference": {
        "thinking": "off",
        "max_model_len": 768,
        "sampling": {"temperature": 0.9, "max_tokens_per_turn": 96},
        "limits": {"max_turns": 7, "max_total_tokens": 700},
        "server_urls": ["http://10.0.0.9:8000"],  # where it was served then: not the evaluation's business
        "num_servers": 4,
    },
    "env": {"edit_attempts": 1, "view_lines": 33, "workers": 9},
    "trainer": {"temperature": 0.9},
}


def caller(root: Path, *overrides: str) -> RunConfig:
    """The configuration `tandem eval --storage.root ROOT OVERRIDES...` builds."""
    return load_config(RunConfig, None, ["--storage.root", str(root), "--run", RUN, *overrides])


def test_the_stored_settings_win_over_defaults_and_lose_to_explicit_keys(tmp_path: Path, capsys) -> None:
    stored = json.loads(RunConfig.model_validate(STORED).model_dump_json())
    given = caller(tmp_path, "--inference.limits.max_turns", "5", "--env.workers", "2")
    assert explicit_fields(given.inference) == {"limits": {"max_turns": 5}}
    config = with_stored_settings(given, stored)
    said = capsys.readouterr().out
    assert f"run {RUN}: inference and env settings as the run stored them, except env.workers, " in said
    inference, env = config.inference, config.env
    assert inference.thinking == "off" and inference.max_model_len == 768
    assert (inference.sampling.temperature, inference.sampling.max_tokens_per_turn) == (0.9, 96)
    assert (inference.limits.max_turns, inference.limits.max_total_tokens) == (5, 700)  # explicit, then stored
    assert inference.server_urls == [] and inference.num_servers == 1  # where it runs stays the caller's
    assert (env.edit_attempts, env.view_lines, env.workers) == (1, 33, 2)
    assert config.run == RUN and config.storage.root == str(tmp_path)  # the rest is the caller's as it was
    # Every key kept as the caller's is a key of its section (a misspelt one would keep nothing).
    assert CALLERS_OWN["inference"] <= set(RunInferenceConfig.model_fields)
    assert CALLERS_OWN["env"] <= set(RunEnvConfig.model_fields)


def test_keys_a_stored_configuration_has_and_this_version_lacks_are_dropped_by_name(tmp_path: Path, capsys) -> None:
    stored = {"inference": {"thinking": "on", "retired_option": 3, "sampling": {"old_knob": 1}}, "env": {}}
    config = with_stored_settings(caller(tmp_path), stored)
    assert config.inference.thinking == "on"
    assert "inference.retired_option, inference.sampling.old_knob" in capsys.readouterr().out
    assert with_stored_settings(caller(tmp_path), None).inference == RunConfig().inference


def test_the_evaluate_flow_serves_the_run_with_its_stored_settings(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "lake"
    store = open_store(str(root))
    runs.record_start(store, RUN, start_record(RunConfig.model_validate({**STORED, "run": RUN}), "rl", None))
    weights = Path(checkpoints.weights_uri(store, RUN, 1))
    weights.mkdir(parents=True)
    checkpoints.publish(store, RUN, 1, 0, str(weights))
    # A replay-train run of it reads its source's settings.
    runs.record_start(store, "retrained", {"kind": "replay-train", "config": "{}", "source_run": RUN})
    assert stored_config(store, RUN) is not None and stored_config(store, "retrained") == stored_config(store, RUN)

    served: list[RunConfig] = []

    @contextlib.asynccontextmanager
    async def open_rollout_lane(config: RunConfig, store: Any, train: list, heldout: list):
        served.append(config)
        yield object()

    async def evaluate_policy(lane: Any, k: int, name: str) -> dict:
        return {"version": 1, "pass@1": 0.5, "solved": []}

    async def no_artifact(**kwargs: Any) -> None:
        return None

    heldout = generate_micro_tasks(2, seed=3, split="heldout")
    monkeypatch.setattr(evaluate_flow, "open_rollout_lane", open_rollout_lane)
    monkeypatch.setattr(evaluate_flow, "evaluate_policy", evaluate_policy)
    monkeypatch.setattr(evaluate_flow, "acreate_table_artifact", no_artifact)
    monkeypatch.setattr(evaluate_flow, "load_corpus", lambda path: heldout)
    given = caller(root, "--inference.sampling.temperature", "0.5", "--trainer.temperature", "0.5")
    result = asyncio.run(evaluate_flow.evaluate.fn(given, corpus_dir="corpus"))
    assert result["pass@1"] == 0.5
    (config,) = served
    assert config.inference.thinking == "off" and config.inference.limits.max_turns == 7
    assert config.inference.sampling.temperature == 0.5  # the caller said so
    assert config.env.edit_attempts == 1
