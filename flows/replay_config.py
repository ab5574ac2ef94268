"""Configurations of the replays: work on a finished run's stored trajectories and
write the results to a new run, never to the source.

    RescoreConfig       re-grade the source's stored patches with the current grader
    ReplayTrainConfig   train a new run on the source's episodes (another loss,
                        advantages or learning rate)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.env.config import EnvConfig
from flows.run_config import RunTrainerConfig
from storage.config import StorageConfig
from storage.layout import check_name


def _derived_name(source: str, what: str) -> str:
    return f"{source[:100]}-{what}-{datetime.now():%Y%m%d-%H%M%S}"


def _check_names(config: Any, what: str) -> None:
    check_name("run", config.source_run)
    if config.run is None:
        config.run = _derived_name(config.source_run, what)
    check_name("run", config.run)
    if config.run == config.source_run:
        raise ValueError(
            f"run: {config.run!r} is the source run; give the {what} its own run name (the source run is never written)"
        )


class RescoreConfig(BaseModel):
    """Re-grade a run's stored final patches with the current grader."""

    model_config = ConfigDict(extra="forbid")

    source_run: str = Field(..., description="Run whose stored patches are re-graded; it is only read.")
    run: str | None = Field(
        None,
        description="Run the re-grades are written to (table `rescores`). Default: <source_run>-rescore-<date>-<time>.",
    )
    storage: StorageConfig = Field(default_factory=StorageConfig, description="The lake holding both runs.")
    steps: list[int] | None = Field(None, description="Steps of the source run to re-grade; default: every step.")
    env: EnvConfig | None = Field(
        None,
        description="Sandbox and grading settings; default: the ones the source run "
        "stored at its start (the grading code is always the current one).",
    )
    corpus_path: str | None = Field(
        None,
        description="Directory of the corpus the source run read, for tasks whose "
        "files are snapshots; default: the path its start recorded.",
    )

    @model_validator(mode="after")
    def _names(self) -> RescoreConfig:
        _check_names(self, "rescore")
        return self


class ReplayTrainConfig(BaseModel):
    """Train a new run from a source run's stored episodes."""

    model_config = ConfigDict(extra="forbid")

    source_run: str = Field(..., description="Run whose rollouts are trained on; it is only read.")
    run: str | None = Field(
        None,
        description="The new run (weights, steps and its start record go there). "
        "Default: <source_run>-replay-<date>-<time>.",
    )
    storage: StorageConfig = Field(default_factory=StorageConfig, description="The lake holding both runs.")
    model_path: str | None = Field(
        None,
        description="Starting weights (HF directory or s3://); default: the source "
        "run's version 0, the weights its RL began from.",
    )
    first_step: int = Field(0, ge=0, description="First source step to train on.")
    steps: int | None = Field(
        None, ge=1, description="Source steps to train on from first_step; default: all that exist."
    )
    trainer: RunTrainerConfig = Field(
        default_factory=RunTrainerConfig,
        description="Objective and optimizer. Only the fields set here replace the source run's (e.g. "
        "--trainer.lr, --trainer.loss_type, --trainer.std_scale_advantages); the rest are the source run's.",
    )
    state_dir: str | None = Field(
        None,
        description="Local directory for the resumable trainer state; default <root>/<run>/trainer_state "
        "(~/.cache/tandem-rl/work/<run>/trainer_state for an s3:// root; copied into the lake as well).",
    )
    allow_config_change: bool = Field(
        False,
        description="Resume the run even when this configuration differs from "
        "the one stored at its start (only steps may differ otherwise).",
    )

    @model_validator(mode="after")
    def _names(self) -> ReplayTrainConfig:
        _check_names(self, "replay")
        return self
