"""Whole tensors out of a sharded model, for export (collective: every rank calls).

FSDP2 parameters are DTensors holding one shard per rank; expert-parallel experts
are plain tensors holding E/ep experts per rank (expert_parallel.py). `full_state_dict`
gathers one tensor at a time so the peak is one whole tensor beyond the model's own
shards, and keeps the result on rank 0 only (on the CPU), which is where export runs.
Tied weights (embeddings = lm_head) stay one tensor, as `save_pretrained` expects.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from engines.trainer.expert_parallel import ExpertParallel


def full_state_dict(model: nn.Module, ep: ExpertParallel | None = None) -> dict[str, torch.Tensor] | None:
    """The model's state dict with whole tensors on rank 0; None on other ranks."""
    keep = dist.get_rank() == 0
    out: dict[str, torch.Tensor] = {}
    gathered: dict[int, torch.Tensor] = {}  # id of a shared (tied) tensor -> its whole tensor
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) in gathered:
            if keep:
                out[key] = gathered[id(value)]
            continue
        whole = value.full_tensor() if isinstance(value, DTensor) else value
        if ep is not None and key in ep.keys:  # experts: concatenate the ranks' slices in rank order
            parts = [torch.empty_like(whole) for _ in range(ep.size)]
            dist.all_gather(parts, whole.detach().contiguous(), group=ep.group)
            whole = torch.cat(parts, 0)
        whole = whole.detach().cpu() if keep else None
        gathered[id(value)] = whole
        if keep:
            out[key] = whole
    return out if keep else None
