"""The trainer lane of the asynchronous RL loop; runnable under torchrun.

    python -m engines.trainer.lane --config run.json        (a `LaneConfig` as JSON)
    torchrun --nproc_per_node 2 -m engines.trainer.lane --config run.json

For each step s from `first_step` on: wait until step s's rollouts are complete,
train one optimizer step on them, export weights v = s + 1 to
`storage.checkpoints.weights_uri(store, run, v)` and publish them, write the step's
metrics row and the advantages it trained on (the `advantages` table), then save
the resumable state. `train_steps` is the same loop as a plain function (tests and
Prefect tasks call it).

Step completion, the waits and the work folder are the lanes' contract
(engines/handoff.py): step s is complete when its `final` shard exists; with
`completion="any_shard"` any shard completes it.

Crash and restart: the state is saved after publishing, so a restart resumes at the
step after the newest saved state. A step whose state was not saved is redone from
the same state and data and publishes the same version again (idempotent); no step
is skipped and none is applied twice. Each saved state is also copied into the lake
(engines/trainer/lake_state.py): a lane restarted on another machine, with an empty
local state folder, takes the newest one from there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from engines.handoff import Completion, wait_for_step, work_dir
from engines.lifetime import end_with_owner, exit_with_parent_now
from engines.model.load import load_tokenizer, local_model_dir
from engines.step_metrics import episode_metrics
from engines.trainer import lake_state
from engines.trainer.advantages import advantages_record, step_advantages
from engines.trainer.checkpoint import load_latest_state, save_state
from engines.trainer.config import TrainerConfig
from engines.trainer.distributed import load_model, make_accelerator, make_trainee
from engines.trainer.export import export_weights
from engines.trainer.phase_clock import PhaseClock
from engines.trainer.rl_step import rl_step
from storage import checkpoints, shards
from storage.config import StorageConfig
from storage.fs import open_store
from storage.tables import write_advantages, write_step_metrics

log = logging.getLogger("tandem.trainer")
_FORMAT_NAMES = {"fp32": "safetensors", "bf16": "safetensors", "fp8": "safetensors-fp8"}


class LaneConfig(BaseModel):
    """One trainer lane: which model, which run, which steps."""

    model_config = ConfigDict(extra="forbid")

    model_dir: str = Field(
        ..., description="Starting weights: a local HF model dir or s3:// URL (e.g. the SFT export)."
    )
    storage: StorageConfig = Field(default_factory=StorageConfig, description="The lake holding the run.")
    run: str = Field(..., description="Run name (rollouts are read from and weights published under it).")
    source_run: str | None = Field(
        None,
        description="Read each step's rollouts from this run instead (a replay: train a new run on stored "
        "trajectories). Weights, metrics and state still go to `run`; the source is only read.",
    )
    first_step: int = Field(0, ge=0, description="First step to train (ignored when a saved state is newer).")
    num_steps: int = Field(..., ge=1, description="Train steps first_step .. first_step + num_steps - 1.")
    state_dir: str | None = Field(
        None,
        description="Local directory for resumable state; default <root>/<run>/trainer_state for a local root, "
        "~/.cache/tandem-rl/work/<lake>/<run>/trainer_state for an s3:// root. Each saved state is also copied into "
        "the lake (<root>/<run>/trainer_state), so a lane restarted on another machine resumes at its last step.",
    )
    completion: Completion = Field(
        "final_shard", description="When a step's rollouts count as complete (engines/handoff.py)."
    )
    poll_interval_s: float = Field(0.5, gt=0, description="Seconds between checks for the next step's rollouts.")
    wait_timeout_s: float = Field(3600.0, gt=0, description="Give up waiting for one step's rollouts after this long.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="Optimizer, loss and export settings.")

    @classmethod
    def from_file(cls, path: str | Path) -> LaneConfig:
        """The lane's configuration from its JSON file (both lane entry points take one)."""
        return cls.model_validate(json.loads(Path(path).read_text()))

    @property
    def rollouts_run(self) -> str:
        """The run whose rollouts the lane trains on."""
        return self.source_run or self.run

    def state_path(self) -> Path:
        if self.state_dir:
            return Path(self.state_dir)
        return work_dir(self.storage.root, self.run) / "trainer_state"


class TrainerLane:
    """The lane's state between steps: model, optimizer, store, next step.

    `wait_for_rollouts(step)` blocks until the step's rollouts are complete;
    `train(step)` trains on them and publishes version step + 1. Prefect's tasks
    (tasks/trainer.py) wrap each; `run` is the one step loop.
    """

    def __init__(self, cfg: LaneConfig) -> None:
        torch.manual_seed(cfg.trainer.seed)
        self.cfg = cfg
        self.store = open_store(cfg.storage)
        t = cfg.trainer
        self.accelerator = make_accelerator(t.mixed_precision, t.parallelism)
        model = load_model(cfg.model_dir, t)
        self.arch = type(model).__name__  # before FSDP2 renames the class (export writes it)
        self.tokenizer = load_tokenizer(cfg.model_dir)
        self.trainee = make_trainee(model, t, self.accelerator, local_model_dir(cfg.model_dir))
        self.mirror = not lake_state.is_in_lake(self.store, cfg.run, cfg.state_path())
        if self.mirror and self.accelerator.is_main_process:
            if (aside := lake_state.set_aside_foreign(self.store, cfg.run, cfg.state_path())) is not None:
                log.warning(
                    "local trainer state %s is newer than run %s's newest weights in %s: not this lake's run, "
                    "moved to %s; starting from the lake's state",
                    cfg.state_path(),
                    cfg.run,
                    self.store.display,
                    aside,
                )
            fetched = lake_state.download_newer(self.store, cfg.run, cfg.state_path())
            if fetched is not None:
                log.info("trainer state after step %d taken from the lake", fetched)
        self.accelerator.wait_for_everyone()
        saved = load_latest_state(self.accelerator, cfg.state_path(), self.trainee.load_local)
        self.next_step = cfg.first_step if saved is None else max(cfg.first_step, saved + 1)
        if saved is not None:
            log.info("resuming run %s after step %d (state %s)", cfg.run, saved, cfg.state_path())

    def wait_for_rollouts(self, step: int) -> None:
        cfg = self.cfg
        wait_for_step(self.store, cfg.rollouts_run, step, cfg.completion, cfg.poll_interval_s, cfg.wait_timeout_s)

    def train(self, step: int) -> dict:
        """One optimizer step on step `step`'s rollouts; export, publish, record, save state."""
        if step != self.next_step:
            raise ValueError(f"trainer lane expects step {self.next_step} next, got {step}")
        cfg, store = self.cfg, self.store
        episodes = shards.read_step(store, cfg.rollouts_run, step)
        t0 = time.perf_counter()
        advantages = step_advantages(episodes, cfg.trainer.std_scale_advantages, cfg.trainer.negative_advantage_scale)
        metrics = rl_step(self.trainee, episodes, cfg.trainer, advantages)
        metrics["training_s"] = time.perf_counter() - t0
        version = step + 1
        metrics["policy_version"] = version
        clock = PhaseClock()
        # Sharded models gather whole tensors onto rank 0 first (every rank takes part).
        with clock("export"):
            state = self.trainee.full_state() if self.trainee.full_state is not None else None
        if self.accelerator.is_main_process:
            uri = checkpoints.weights_uri(store, cfg.run, version)
            with clock("export"):
                export_weights(
                    self.trainee.module,
                    self.tokenizer,
                    uri,
                    cfg.trainer.export_format,
                    store=store,
                    state_dict=state,
                    architecture=self.arch,
                )
            with clock("publish"):
                checkpoints.publish(store, cfg.run, version, step, uri, _FORMAT_NAMES[cfg.trainer.export_format])
            metrics.update(episode_metrics(episodes, step), **clock.metrics())
            write_step_metrics(store, cfg.run, step, metrics)
            write_advantages(
                store, cfg.run, step, advantages_record(episodes, advantages, cfg.run, step, cfg.rollouts_run)
            )
            log.info("step %d: %s", step, _summary(metrics))
        self.accelerator.wait_for_everyone()
        save_state(self.accelerator, cfg.state_path(), step, cfg.trainer.keep_last_states, self.trainee.save_local)
        if self.mirror and self.accelerator.is_main_process:
            lake_state.upload(store, cfg.run, cfg.state_path(), step, cfg.trainer.keep_last_states)
        self.next_step = step + 1
        return metrics

    def run(
        self,
        wait: Callable[[TrainerLane, int], None] = wait_for_rollouts,
        train: Callable[[TrainerLane, int], dict] = train,
        on_step: Callable[[int, dict], None] | None = None,
    ) -> list[dict]:
        """The step loop, from `next_step` to the lane's last step, then `close`: `wait`
        and `train` each step (Prefect's flow passes its tasks that wrap them), then
        `on_step(step, metrics)`. Returns each trained step's metrics."""
        results = []
        try:
            for step in range(self.next_step, self.cfg.first_step + self.cfg.num_steps):
                wait(self, step)
                results.append(train(self, step))
                if on_step is not None:
                    on_step(step, results[-1])
        finally:
            self.close()
        return results

    def close(self) -> None:
        self.trainee.replay.close()


def train_steps(cfg: LaneConfig, on_step: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Run the lane's steps (resuming from saved state), `on_step(step, metrics)` after
    each; returns each trained step's metrics."""
    return TrainerLane(cfg).run(on_step=on_step)


def _summary(m: dict) -> str:
    if m.get("skipped"):
        return f"SKIPPED ({'no trainable tokens' if m.get('skip_reason_no_tokens') else 'non-finite loss or gradient'})"
    keys = ("loss", "reward_mean", "mismatch_kl", "masked_fraction", "entropy", "grad_norm", "trained_tokens")
    return " ".join(f"{k}={m[k]:.4g}" for k in keys if m.get(k) is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="JSON file holding a LaneConfig")
    args = parser.parse_args(argv)
    start_rank()
    train_steps(LaneConfig.from_file(args.config))
    leave_group()
    return 0


def start_rank() -> None:
    """Set up this process as a rank of the lane (or its only process): its lifetime and its log lines."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # torchrun starts each rank in a session of its own, out of reach of a kill of
        # its group: a rank ends when torchrun does, and when the run that owns the lane does.
        exit_with_parent_now()
    end_with_owner()
    logging.basicConfig(level=logging.INFO, format="[trainer] %(message)s", stream=sys.stdout)


def leave_group() -> None:
    """After the last step: wait for the other ranks, then leave the process group."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
