"""Resumable trainer state through Accelerate: model, optimizer, scheduler, RNG, step.

Layout under a state root (a local directory every rank can reach):

    step-00000007/           complete state after step 7 (Accelerate's save_state files,
                             sharded models' shard-<rank>.pt, progress.json {"step": 7})
    .step-00000008.tmp/      a save in progress; a crash leaves it, and it is ignored

A save writes into the hidden staging directory, then the main process commits it
to its final name (`storage.atomic_dir.commit_dir`: fsync, rename): the rename is
the commit, so a crash mid-save keeps the previous state. Older states beyond `keep_last` are deleted after the commit.

Tied weights (lm_head = embeddings) are saved once: safetensors cannot hold two names
for one tensor, and Accelerate drops the duplicate with a warning on every save. Before
that, transformers' own `remove_tied_weights_from_state_dict` removes the duplicates the
model declares tied (the same keys `save_pretrained` leaves out), and safetensors'
`load_model` ties them back on load.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_utils import remove_tied_weights_from_state_dict

from storage.atomic_dir import commit_dir

_STATE_RE = re.compile(r"^step-(\d{8})$")


def state_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def list_states(root: Path) -> list[int]:
    """Steps with a committed state, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    steps = [
        int(m.group(1)) for p in root.iterdir() if (m := _STATE_RE.match(p.name)) and (p / "progress.json").is_file()
    ]
    return sorted(steps)


def save_state(
    accelerator: Accelerator, root: Path, step: int, keep_last: int = 2, save_local: Callable[[str], None] | None = None
) -> Path:
    """Save the state after `step` atomically; every rank must call this.
    `save_local(dir)` writes what each rank alone holds (sharded models) before the commit."""
    root = Path(root)
    staging = root / f".step-{step:08d}.tmp"
    final = state_dir(root, step)
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)  # leftover of a crashed save
        root.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    handle = accelerator.register_save_state_pre_hook(_without_tied_duplicates(accelerator))
    try:
        accelerator.save_state(str(staging), safe_serialization=True)
    finally:
        handle.remove()
    if save_local is not None:
        save_local(str(staging))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (staging / "progress.json").write_text(json.dumps({"step": step}))
        commit_dir(staging, final)  # fsyncs every rank's files; a redone step replaces its older state
        for old in list_states(root)[:-keep_last]:
            shutil.rmtree(state_dir(root, old), ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def _without_tied_duplicates(
    accelerator: Accelerator,
) -> Callable[[list[nn.Module], list[dict[str, torch.Tensor]], str], None]:
    """A save-state pre-hook that drops each transformers model's tied duplicates from
    the state dict Accelerate is about to write."""

    def hook(models: list[nn.Module], weights: list[dict[str, torch.Tensor]], _: str) -> None:
        # `weights` holds one state dict per model Accelerate saves itself (none under its
        # own FSDP, whose saving is separate); the list is what save_state writes.
        for i, (model, state) in enumerate(zip(models, weights, strict=False)):
            unwrapped = accelerator.unwrap_model(model)
            if isinstance(unwrapped, PreTrainedModel):
                weights[i] = remove_tied_weights_from_state_dict(dict(state), unwrapped)

    return hook


def load_latest_state(
    accelerator: Accelerator, root: Path, load_local: Callable[[str], None] | None = None
) -> int | None:
    """Restore the newest committed state; returns its step, or None when there is none."""
    steps = list_states(root)
    if not steps:
        return None
    path = state_dir(root, steps[-1])
    accelerator.load_state(str(path))
    if load_local is not None:
        load_local(str(path))
    return json.loads((path / "progress.json").read_text())["step"]
