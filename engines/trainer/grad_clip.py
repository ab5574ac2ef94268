"""Gradient clipping by the global norm, for every layout the trainer runs: one
process, FSDP2 shards, and expert-parallel experts beside FSDP-sharded dense weights."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn


def clip_grad_norm(
    params: Iterable[nn.Parameter],
    max_norm: float,
    expert_params: Iterable[nn.Parameter] = (),
    expert_group: dist.ProcessGroup | None = None,
) -> float:
    """Global gradient norm, then clip in place; returns the norm before clipping.

    Squares are summed per device mesh (a DTensor norm's `full_tensor` covers its mesh):
    torch's clip_grad_norm_ refuses to stack norms of different meshes. Expert slices
    differ across the expert-parallel group, so their squares are summed over
    `expert_group` as well (every rank of it must call this)."""
    expert_ids = {id(p) for p in expert_params}
    dense: dict[object, list[torch.Tensor]] = {}
    experts: dict[object, list[torch.Tensor]] = {}
    device = None
    for p in params:
        device = device or p.device
        if p.grad is not None:
            side = experts if id(p) in expert_ids else dense
            side.setdefault(getattr(p.grad, "device_mesh", None), []).append(p.grad)
    total = torch.zeros((), dtype=torch.float64)
    for side, group in ((dense, None), (experts, expert_group)):
        squares = _sum_of_squares(side)
        if group is not None:
            squares = squares.to(device)
            dist.all_reduce(squares, group=group)
        total = total + squares.cpu()
    norm = float(total.sqrt())
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for side in (dense, experts):
            for grads in side.values():
                for g in grads:
                    g.mul_(scale)
    return norm


def _sum_of_squares(by_mesh: dict[object, list[torch.Tensor]]) -> torch.Tensor:
    sq = torch.zeros((), dtype=torch.float64)
    for grads in by_mesh.values():
        n = torch.nn.utils.get_total_norm(grads)
        sq = sq + (n.full_tensor() if hasattr(n, "full_tensor") else n).double().cpu() ** 2
    return sq
