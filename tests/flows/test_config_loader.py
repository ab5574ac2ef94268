"""load_config: TOML file plus --key overrides into a pydantic model, and errors
that name the key, where it came from and what is allowed."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from flows.config_loader import ConfigError, load_config, parse_overrides


class Precision(enum.Enum):
    FP32 = "fp32"
    BF16 = "bf16"


class Trainer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-4, gt=0, description="learning rate")
    batch_size: int = Field(32, ge=1, description="episodes per step")
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="optimizer")
    precision: Precision = Field(Precision.FP32, description="parameter dtype")
    betas: list[float] = Field([0.9, 0.95], description="Adam betas")


class Run(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("tiny", description="run name")
    seed: int = Field(0, description="seed")
    resume: bool = Field(False, description="resume from the latest checkpoint")


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: Run = Field(default_factory=Run, description="the run")
    trainer: Trainer = Field(default_factory=Trainer, description="the trainer")
    notes: str | None = Field(None, description="free text")


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_defaults_toml_and_overrides_apply_in_that_order(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, '[trainer]\nlr = 3e-4\nbatch_size = 8\n[run]\nname = "from-file"\n')
    cfg = load_config(Example, toml, ["--trainer.lr", "1e-5", "--run.resume=true", "--trainer.betas", "[0.8, 0.9]"])
    assert cfg.trainer.lr == 1e-5 and cfg.trainer.batch_size == 8
    assert cfg.run.name == "from-file" and cfg.run.resume is True and cfg.run.seed == 0
    assert cfg.trainer.betas == [0.8, 0.9]
    assert load_config(Example, None, []) == Example()


def test_override_values_are_typed_literals_or_plain_text() -> None:
    parsed = parse_overrides(
        [
            "--a",
            "1e-5",
            "--b=true",
            "--c",
            "hello world",
            "--d",
            '"quoted"',
            "--e",
            "-3",
            '--f={"k": 1}',
            "--g",
            "2024-01-01",
        ]
    )
    assert {k: v for k, (_, v) in parsed.items()} == {
        "a": 1e-5,
        "b": True,
        "c": "hello world",
        "d": "quoted",
        "e": -3,
        "f": {"k": 1},
        "g": "2024-01-01",
    }


def test_a_number_given_for_a_text_field_is_kept_as_typed() -> None:
    cfg = load_config(Example, None, ["--run.name", "2024", "--notes", "1e-5", "--run.seed", "7"])
    assert (cfg.run.name, cfg.notes, cfg.run.seed) == ("2024", "1e-5", 7)


def test_unknown_keys_name_the_key_the_allowed_keys_and_the_closest(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "[trainer]\nlearning_rate = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(Example, toml, ["--trainer.batchsize", "4", "--rn.name", "x"])
    message = str(info.value)
    assert f"trainer.learning_rate (in {toml}): unknown key" in message
    assert "trainer.batchsize (from --trainer.batchsize): unknown key; did you mean trainer.batch_size?" in message
    assert "Allowed under 'trainer': lr, batch_size, optimizer, precision, betas" in message
    assert (
        "rn (from --rn.name): unknown key; did you mean run? Allowed at the top level: run, trainer, notes" in message
    )
    assert "3 problems" in message


def test_bad_values_name_the_key_and_the_allowed_values(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, '[trainer]\noptimizer = "adam"\n')
    with pytest.raises(ConfigError) as info:
        load_config(
            Example, toml, ["--trainer.precision", "fp16", "--trainer.lr", "-1", "--trainer.batch_size", "many"]
        )
    message = str(info.value)
    assert f"trainer.optimizer (in {toml}): got 'adam'; allowed values: 'adamw', 'sgd'" in message
    assert "trainer.precision (from --trainer.precision): got 'fp16'; allowed values: 'fp32', 'bf16'" in message
    assert "trainer.lr (from --trainer.lr): Input should be greater than 0 (got -1)" in message
    assert "trainer.batch_size (from --trainer.batch_size): Input should be a valid integer" in message


def test_malformed_overrides_and_files_say_how_to_fix_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="override --trainer.lr has no value: write --trainer.lr VALUE"):
        load_config(Example, None, ["--trainer.lr"])
    with pytest.raises(ConfigError, match="override --trainer.lr has no value"):
        load_config(Example, None, ["--trainer.lr", "--run.seed", "1"])
    with pytest.raises(ConfigError, match="override 'lr' is not an option: write overrides as --section.key VALUE"):
        load_config(Example, None, ["lr", "1"])
    with pytest.raises(ConfigError, match=r"override --trainer\.lr\.x: trainer\.lr is a value, not a section"):
        load_config(Example, None, ["--trainer.lr", "1", "--trainer.lr.x", "2"])
    with pytest.raises(ConfigError, match="config file .*missing.toml does not exist"):
        load_config(Example, tmp_path / "missing.toml", [])
    with pytest.raises(ConfigError, match="is not valid TOML .*line 1"):
        load_config(Example, write_toml(tmp_path, "[trainer\nlr = 1\n"), [])
