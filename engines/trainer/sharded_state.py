"""Resumable state of a sharded model: each rank saves and restores its own shards.

Under FSDP2 (and expert parallel) no rank holds the whole model or optimizer, and
Accelerate only checkpoints what it prepared, so each rank writes
`shard-<rank>.pt` with its local parameter shards and AdamW state into the save
directory that checkpoint.py commits atomically (RNG and scheduler still go through
Accelerate). A restore needs the same processes and parallelism: the file records
them and a mismatch is refused.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor import DTensor


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def save_shard(model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, rank: int, layout: dict) -> None:
    opt = optimizer.state_dict()
    state = {i: {k: _local(v).detach().clone() for k, v in s.items()} for i, s in opt["state"].items()}
    model_state = {k: _local(v).detach().clone() for k, v in model.state_dict().items()}
    payload = {"layout": layout, "model": model_state, "optimizer": {**opt, "state": state}}
    torch.save(payload, Path(directory) / f"shard-{rank:05d}.pt")


def load_shard(model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, rank: int, layout: dict) -> None:
    payload = torch.load(Path(directory) / f"shard-{rank:05d}.pt", weights_only=False)
    if payload["layout"] != layout:
        raise ValueError(
            f"saved trainer state in {directory} was written with {payload['layout']}, this lane runs {layout}: "
            "resume with the same processes and parallelism, or start from the exported weights"
        )
    with torch.no_grad():
        for key, value in model.state_dict().items():
            _local(value).copy_(payload["model"][key])
    params = [p for g in optimizer.param_groups for p in g["params"]]
    opt = payload["optimizer"]
    for i, s in opt["state"].items():  # re-wrap AdamW moments as the parameter's DTensor layout
        p = params[int(i)]
        for k, v in s.items():
            if isinstance(p, DTensor) and v.shape == p.to_local().shape and v.dim() > 0:
                s[k] = DTensor.from_local(v, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
    optimizer.load_state_dict(opt)
