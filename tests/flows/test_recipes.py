"""Every recipe in configs/ is a valid RunConfig, and `tandem run --help` lists every
key with its type, default and description."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from flows.cli import app
from flows.config import RunConfig
from flows.config_help import config_keys
from flows.config_loader import ConfigError, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))


def load_recipe(path: Path) -> RunConfig:
    """The recipe as validated on this machine. Without CUDA, a recipe asking for the
    trainer's context parallel must be refused for that reason, and is then checked with
    trainer.context_parallel_size = 1 (everything else as written)."""
    try:
        return load_config(RunConfig, path, [])
    except ConfigError as err:
        if torch.cuda.is_available() or "context_parallel_size" not in str(err) or "needs CUDA" not in str(err):
            raise
    return load_config(RunConfig, path, ["--trainer.context_parallel_size", "1"])


def test_there_are_cpu_corpus_and_gpu_recipes() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"tiny", "corpus", "qwen3-30b-a3b-8gpu", "glm5-multinode"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_recipe_validates(path: Path) -> None:
    cfg = load_recipe(path)
    assert cfg.rl.batch_size % cfg.rl.group_size == 0
    assert cfg.inference.limits.max_total_tokens <= cfg.inference.max_model_len


def test_tiny_recipe_is_the_default_run() -> None:
    recipe = load_config(RunConfig, CONFIGS[0].with_name("tiny.toml"), [])
    default = load_config(RunConfig, None, [])
    assert recipe.model_dump(exclude={"run"}) == default.model_dump(exclude={"run"})  # the name is new per run


def test_gpu_recipes_ask_for_gpu_options() -> None:
    qwen = load_config(RunConfig, CONFIGS[0].with_name("qwen3-30b-a3b-8gpu.toml"), [])
    assert qwen.model.path == "Qwen/Qwen3-30B-A3B" and qwen.inference.cluster.expert_parallel
    assert qwen.inference.cluster.tensor_parallel_size * qwen.inference.cluster.data_parallel_size == 4
    glm_path = CONFIGS[0].with_name("glm5-multinode.toml")
    glm = load_recipe(glm_path)
    cluster = glm.inference.cluster
    assert cluster.fp8 == "checkpoint" and cluster.expert_parallel and cluster.disaggregation is not None
    assert glm.storage.root.startswith("s3://") and glm.trainer.export_format == "fp8"
    # 131k-token rows: context parallel, checkpointed layers, the output head in chunks.
    written = tomllib.loads(glm_path.read_text())["trainer"]
    assert glm.trainer.seq_len == 131072 and written["context_parallel_size"] > 1
    assert glm.trainer.activation_checkpointing and glm.trainer.logprob_chunk_tokens > 0
    assert glm.inference.max_model_len >= glm.trainer.seq_len


def test_recipe_keys_can_be_overridden_and_typos_are_refused() -> None:
    path = CONFIGS[0].with_name("corpus.toml")
    assert load_config(RunConfig, path, ["--rl.steps", "3"]).rl.steps == 3
    with pytest.raises(ConfigError, match=r"rl\.stepz.*did you mean rl\.steps"):
        load_config(RunConfig, path, ["--rl.stepz", "3"])


def test_run_help_lists_every_key_with_default_and_description() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps long descriptions
    assert "rl.steps (int) = 50" in text
    assert " ".join(RunConfig.model_fields["rl"].annotation.model_fields["steps"].description.split()) in text
    keys = config_keys(RunConfig)
    assert len(keys) > 80
    missing = [k.dotted for k in keys if f"{k.dotted} (" not in text]
    assert not missing, missing
    assert "inference.cluster.disaggregation (section) = unset (off)" in text
