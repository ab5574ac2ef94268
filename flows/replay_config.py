"""Configurations of the replays: work on a finished run's stored trajectories and
write the results to a new run, never to the source.

    RescoreConfig       re-grade the source's stored patches with the current grader
    ReplayTrainConfig   train a new run on the source's episodes (another loss,
                        advantages or learning rate)
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.env.config import EnvConfig
from flows.config import RunTrainerConfig
from flows.replay_source import NEWEST
from storage.config import StorageConfig
from storage.layout import check_name


class _Replay(BaseModel):
    """What every replay names: the source run it only reads and the new run it writes."""

    model_config = ConfigDict(extra="forbid")

    # The new run's default name: <source_run>-<kind>-<date>-<time>.
    kind: ClassVar[str]

    source_run: str = Field(
        ...,
        description="Run whose stored trajectories are read (rescore: its final patches; train: its rollouts); "
        "it is never written. 'newest': the rl run of the lake that started last (for schedules).",
    )
    run: str | None = Field(
        None,
        description="The new run the results are written to (rescore: table `rescores`; train: weights, steps and "
        "its start record). Default: <source_run>-rescore-<date>-<time> or <source_run>-replay-<date>-<time>.",
    )
    storage: StorageConfig = Field(default_factory=StorageConfig, description="The lake holding both runs.")

    @model_validator(mode="after")
    def _names(self) -> Self:
        check_name("run", self.source_run)
        if self.source_run == NEWEST:
            return self  # named by the flow once it has found the newest run (with_source)
        return self.with_source(self.source_run)

    def with_source(self, source_run: str) -> Self:
        """This config reading `source_run`, with the new run's default name when none was given."""
        out = self if source_run == self.source_run else self.model_copy(update={"source_run": source_run})
        if out.run is None:
            out.run = f"{source_run[:100]}-{self.kind}-{datetime.now():%Y%m%d-%H%M%S}"
        check_name("run", out.run)
        if out.run == source_run:
            raise ValueError(
                f"run: {out.run!r} is the source run; give the {self.kind} its own run name "
                "(the source run is never written)"
            )
        return out


class RescoreConfig(_Replay):
    """Re-grade a run's stored final patches with the current grader."""

    kind = "rescore"

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


class ReplayTrainConfig(_Replay):
    """Train a new run from a source run's stored episodes."""

    kind = "replay"

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
        "(~/.cache/tandem-rl/work/<lake>/<run>/trainer_state for an s3:// root; copied into the lake as well).",
    )
    allow_config_change: bool = Field(
        False,
        description="Resume the run even when this configuration differs from "
        "the one stored at its start (only steps may differ otherwise).",
    )

    @model_validator(mode="after")
    def _no_warm_start(self) -> Self:
        if "sft" in self.trainer.model_fields_set:
            raise ValueError(
                "trainer.sft: a replay trains from model_path or the source run's version 0 and makes no warm "
                "start, so nothing reads it; remove it"
            )
        return self
