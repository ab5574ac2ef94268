"""Trainer ranks under torchrun: the command that starts them, the way each rank
ends, and the trainer lane as a child process that this one follows through the
versions it publishes."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import torch

from engines.devices import visible_devices
from engines.handoff import follow_versions
from engines.lifetime import exit_with_parent
from engines.trainer.config import TrainerConfig
from engines.trainer.lane import LaneConfig
from storage.fs import open_store


def torchrun_command(processes: int, *target: str, trainer: TrainerConfig | None = None) -> list[str]:
    """The argv that runs `target` (`-m module ...` or `script.py ...`) as `processes`
    ranks on this machine, with this interpreter (`python -m torch.distributed.run`
    rather than the `torchrun` script, which may belong to another environment). With
    `trainer.nodes` > 1, `processes` counts every node's ranks: this machine runs its
    share as node `trainer.node_rank`, meeting the others at `trainer.rendezvous`."""
    run = [sys.executable, "-m", "torch.distributed.run"]
    if trainer is None or trainer.nodes == 1:
        return [*run, "--standalone", f"--nproc_per_node={processes}", *target]
    nodes = [f"--nnodes={trainer.nodes}", f"--node_rank={trainer.node_rank}", "--rdzv_backend=static"]
    return [
        *run,
        *nodes,
        f"--rdzv_endpoint={trainer.rendezvous}",
        f"--nproc_per_node={processes // trainer.nodes}",
        *target,
    ]


def exit_rank() -> NoReturn:
    """End this rank: wait for the others, leave the process group, exit 0 without the
    interpreter's teardown, which can abort after an autograd all-to-all (shared/REFERENCE.md)."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


# What each rank runs: the lane's own entry point (the rl flow's tracker-writing one
# is flows/trainer_ranks.py); `--config FILE` is appended.
LANE_ENTRY = ("-m", "engines.trainer.lane")


def trainer_environment(trainer: TrainerConfig, base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment the trainer starts with: `base`, showing only `trainer.devices`
    when set (its ranks take cuda:LOCAL_RANK among them)."""
    return {**base, **visible_devices(trainer.devices)}


def start_torchrun(processes: int, target: Sequence[str], trainer: TrainerConfig, **popen: Any) -> subprocess.Popen:
    """torchrun running `target` as `processes` ranks in the trainer's environment (its
    devices); `popen` goes to subprocess.Popen (e.g. stdout=PIPE)."""
    # torchrun stays in this process's group (a group kill of the lane reaches it) and
    # ends when this process does; on SIGTERM it stops its ranks first.
    return subprocess.Popen(
        torchrun_command(processes, *target, trainer=trainer),
        env=trainer_environment(trainer),
        preexec_fn=functools.partial(exit_with_parent, os.getpid(), signal.SIGTERM),
        **popen,
    )


def torchrun_lane(
    cfg: LaneConfig,
    processes: int,
    on_publish: Callable[[int], None] = lambda v: None,
    entry: Sequence[str] = LANE_ENTRY,
) -> int:
    """Run `entry` (the lane's steps, by default `python -m engines.trainer.lane`) under
    torchrun until it exits; calls `on_publish` with each newly published version.
    Returns the newest seen (-1: none)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(cfg.model_dump_json())
    proc = start_torchrun(processes, (*entry, "--config", f.name), cfg.trainer)
    try:
        seen = follow_versions(open_store(cfg.storage), cfg.run, lambda: proc.poll() is None, on_publish)
    finally:
        os.unlink(f.name)
    if proc.returncode:
        raise RuntimeError(f"torchrun trainer lane exited with code {proc.returncode}")
    return seen
