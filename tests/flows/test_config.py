"""A run configuration that cannot work is refused before anything starts, naming the key."""

import re
import subprocess
import sys

import pytest

from flows.config import RunConfig
from flows.config_loader import ConfigError, load_config


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["--rl.batch_size", "30"], "rl.batch_size"),
        (["--rl.async_level", "-1"], "rl.async_level"),
        (["--model.path", "/nonexistent/model"], "model.path"),
        (["--rl.group_sizee", "4"], "rl.group_sizee"),
        (["--tasks.kind", "corpus"], "tasks.corpus_path"),
        (["--tasks.kind", "corpus", "--tasks.corpus_path", "c/"], "env.feedback"),
        (
            [
                "--tasks.kind",
                "corpus",
                "--tasks.corpus_path",
                "c/",
                "--env.feedback",
                "keep",
                "--trainer.sft.demonstrations",
                "oracle",
            ],
            "trainer.sft.demonstrations",
        ),
        (
            [
                "--tasks.kind",
                "corpus",
                "--tasks.corpus_path",
                "c/",
                "--env.feedback",
                "keep",
                "--trainer.sft.edit_tool",
                "edit",
            ],
            "trainer.sft.edit_tool",
        ),
        (["--tasks.hint", "function"], "tasks.hint"),
        (
            ["--tasks.kind", "corpus", "--tasks.corpus_path", "c/", "--env.feedback", "keep"]
            + ["--trainer.sft.failed_attempt_share", "0.2"],
            "trainer.sft.failed_attempt_share",
        ),
        (["--trainer.seq_len", "2048", "--inference.max_model_len", "2048"], "model.tiny.max_position_embeddings"),
        (["--eval.tasks", "600"], "eval.tasks"),
        (["--inference.sampling.temperature", "1.0"], "trainer.temperature"),
        (["--trainer.sft.demonstrations", "candidates", "--env.edit_attempts", "0"], "env.edit_attempts"),
        (["--trainer.sft.edit_tool", "change"], "trainer.sft.edit_tool"),
    ],
)
def test_bad_run_configs_name_the_key(overrides, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(RunConfig, None, overrides)


def test_defaults_learn_and_fit_the_tiny_model():
    cfg = load_config(RunConfig, None, [])
    assert cfg.rl.group_size > 1 and cfg.rl.batch_size % cfg.rl.group_size == 0
    assert cfg.inference.limits.max_total_tokens <= cfg.inference.max_model_len
    assert cfg.trainer.seq_len >= cfg.inference.max_model_len


def test_toml_and_overrides_compose(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('run = "exp1"\n[rl]\nsteps = 5\nasync_level = 0\n')
    cfg = load_config(RunConfig, path, ["--rl.steps", "7"])
    assert (cfg.run, cfg.rl.steps, cfg.rl.async_level) == ("exp1", 7, 0)


def test_overriding_one_nested_key_keeps_the_runs_other_defaults():
    cfg = load_config(
        RunConfig,
        None,
        [
            "--inference.limits.max_concurrent_episodes",
            "256",
            "--inference.sampling.temperature",
            "0.7",
            "--trainer.temperature",
            "0.7",
        ],
    )
    default = RunConfig()
    assert cfg.inference.limits.max_concurrent_episodes == 256
    assert (
        cfg.inference.limits.max_total_tokens
        == default.inference.limits.max_total_tokens
        <= cfg.inference.max_model_len
    )
    assert cfg.inference.sampling.max_tokens_per_turn == default.inference.sampling.max_tokens_per_turn


def test_retention_keeps_at_least_the_versions_rollouts_may_use() -> None:
    from flows.config import RunConfig

    assert RunConfig(rl={"async_level": 2}).retention.last(2) == 3
    with pytest.raises(ValueError, match=r"retention.keep_last \(1\) is below rl.async_level \+ 1 \(3\)"):
        RunConfig(rl={"async_level": 2}, retention={"keep_last": 1})


def test_top_p_below_one_is_refused_for_rl_but_not_for_plain_inference() -> None:
    from engines.inference.config import InferenceConfig

    with pytest.raises(ValueError, match=r"inference\.sampling\.top_p = 0\.9: .*importance ratios.*use top_p = 1\.0"):
        RunConfig(inference={"sampling": {"top_p": 0.9}})
    assert RunConfig(inference={"sampling": {"top_p": 1.0}}).inference.sampling.top_p == 1.0
    # Evaluation and benchmarks sample through InferenceConfig itself, where a nucleus is fine.
    assert InferenceConfig(model_dir="m", sampling={"top_p": 0.9}).sampling.top_p == 0.9


def test_inference_model_dir_is_refused_as_the_run_fills_it() -> None:
    with pytest.raises(ValueError, match=r"inference\.model_dir = '/my/model': .*set model\.path"):
        RunConfig(inference={"model_dir": "/my/model"})
    assert RunConfig().inference.model_dir == ""


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"model": {"tiny": {"num_layers": 2}}}, "model.tiny.num_layers"),
        ({"trainer": {"sft": {"max_steps": 10}}}, "trainer.sft.max_steps"),
        ({"trainer": {"sft": {"lr": 1e-3, "batch_size": 8}}}, "trainer.sft.lr"),
    ],
)
def test_tiny_model_settings_are_refused_with_a_model_path(section: dict, named: str) -> None:
    RunConfig(**section)  # the tiny model reads them
    hub = {"path": "Qwen/Qwen3-30B-A3B"}
    given = {"tool_format": "hermes"}  # 'auto' would read the id's template: tests/engines/model/test_hub.py
    key = re.escape(named)
    with pytest.raises(ValueError, match=rf"{key} = .*only to the tiny model.*unset model\.path"):
        RunConfig(**{**section, "model": {**section.get("model", {}), **hub}, "inference": given})
    assert RunConfig(model=hub, inference=given).model.path == hub["path"]  # the defaults pass


@pytest.mark.chat_template
def test_native_tool_calls_need_a_model_whose_template_lists_tools(tmp_path) -> None:
    from tests.chat_models import build_chat_model

    with pytest.raises(ValueError, match=r"inference\.tool_format = 'hermes': the tiny model's chat template"):
        RunConfig(inference={"tool_format": "hermes"})
    llama3 = build_chat_model("llama3", tmp_path / "llama3")
    with pytest.raises(ValueError, match=r"inference\.tool_format = 'hermes': the chat template of model\.path"):
        RunConfig(model={"path": str(llama3)}, inference={"tool_format": "hermes"})
    chatml = build_chat_model("chatml", tmp_path / "chatml")
    assert RunConfig(model={"path": str(chatml)}, inference={"tool_format": "hermes"}).inference.tool_format == "hermes"
    # 'auto', the default: the format the template writes calls in, else the text actions.
    assert RunConfig().inference.tool_format == "text"
    assert RunConfig(model={"path": str(chatml)}).inference.tool_format == "hermes"
    assert RunConfig(model={"path": str(llama3)}).inference.tool_format == "text"
    with pytest.raises(ValueError, match=r"inference\.tool_format = 'auto' reads the chat template"):
        RunConfig(model={"path": "s3://bucket/model"})


def test_the_curriculum_reaches_the_rollout_lane():
    from flows.runtime import rollout_settings

    assert rollout_settings(RunConfig()).curriculum == "draw"
    settings = rollout_settings(RunConfig(rl={"curriculum": "mixed", "batch_size": 32, "group_size": 4}))
    assert (settings.curriculum, settings.tasks_per_step) == ("mixed", 8)
    with pytest.raises(ValueError, match="curriculum"):
        RunConfig(rl={"curriculum": "band"})


def test_reading_a_run_configuration_imports_neither_torch_nor_transformers() -> None:
    """Every `tandem` command and flow process reads one; torch and transformers cost about
    5 CPU-seconds to import (7.7 s for `tandem run --help` when they were imported here)."""
    probe = "import sys, flows.config; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
