"""Expert parallel on a stock transformers MoE, through module hooks only.

Each rank of an expert-parallel group of size `ep` keeps experts
[r * E/ep, (r + 1) * E/ep) of every layer (the fused 3-D expert tensors are sliced
along their expert dimension; `num_experts` of the experts module becomes E/ep so
transformers' own expert kernels, grouped_mm or eager, run the local slice).

Around the experts module of each MoE block (`experts(hidden [T, H], index [T, k],
weights [T, k])` in every transformers 5 family):
- a forward pre-hook sorts the T*k (token, slot) pairs by the rank that owns their
  expert, exchanges counts, then sends the pairs' hidden states and local expert ids
  with all-to-all (autograd-aware: the backward is the reverse all-to-all), and
  hands the experts module the received pairs with weight 1;
- a forward hook sends each pair's expert output back, restores the pair order and
  sums the k outputs of each token weighted by the router's weights, on the token's
  own rank, so the router's gradient stays local.

Every rank runs every layer's exchange in the same order (micro-batches are padded
to the same count in rl_step), which keeps the collectives in lockstep. Gradients of
expert weights arrive whole from every rank of the group: the caller scales them
(FSDP2's gradient divide factor, see parallelize.py). The model class is untouched;
`ExpertParallel.keys` names the sliced state-dict entries so a full state dict can be
gathered for export (full_state.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.nn.functional import all_to_all_single as all_to_all_autograd


def find_experts(model: nn.Module) -> dict[str, nn.Module]:
    """Routed-expert modules (fused 3-D weights, one slice per expert) by module name."""
    return {
        name: m
        for name, m in model.named_modules()
        if name.endswith(".experts")
        and isinstance(getattr(m, "down_proj", None), nn.Parameter)
        and m.down_proj.dim() == 3
    }


@dataclass
class ExpertParallel:
    """Where the experts went: the group, its size, and the sliced state-dict keys."""

    group: dist.ProcessGroup
    size: int
    keys: set[str] = field(default_factory=set)
    modules: list[nn.Module] = field(default_factory=list)


def apply_expert_parallel(model: nn.Module, group: dist.ProcessGroup) -> ExpertParallel:
    """Slice every experts module of `model` over `group` and hook in the token exchange."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    ep = ExpertParallel(group, size)
    experts = find_experts(model)
    if not experts:
        raise ValueError(f"{type(model).__name__} has no fused experts modules: expert parallel needs an MoE model")
    for name, module in experts.items():
        total = int(module.num_experts)
        if total % size:
            raise ValueError(f"{name}: {total} experts do not split over expert_parallel_size={size}")
        local = total // size
        for pname, p in list(module.named_parameters(recurse=False)):
            if p.dim() >= 2 and p.shape[0] == total:  # per-expert tensors (weights and biases) only
                setattr(module, pname, nn.Parameter(p.detach()[rank * local : (rank + 1) * local].clone()))
                ep.keys.add(f"{name}.{pname}")
        module.num_experts = local
        _hook(module, local, group, size)
        ep.modules.append(module)
    return ep


def _hook(module: nn.Module, local: int, group: dist.ProcessGroup, size: int) -> None:
    state: dict[str, object] = {}

    def dispatch(mod: nn.Module, args: tuple) -> tuple:
        hidden, index, weights = args  # [T, H], long [T, k], [T, k]
        T, k = index.shape
        owner = (index.reshape(-1) // local).long()  # rank holding each pair's expert
        order = torch.argsort(owner, stable=True)  # pairs grouped by destination rank
        send = torch.bincount(owner, minlength=size)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        send_sizes, recv_sizes = send.tolist(), recv.tolist()
        x = hidden[order // k]
        out = x.new_empty(sum(recv_sizes), x.shape[-1])
        x = all_to_all_autograd(out, x, recv_sizes, send_sizes, group=group)
        ids = (index.reshape(-1)[order] % local).contiguous()
        got = ids.new_empty(sum(recv_sizes))
        dist.all_to_all_single(got, ids, recv_sizes, send_sizes, group=group)
        state.update(order=order, send=send_sizes, recv=recv_sizes, T=T, k=k, weights=weights, dtype=hidden.dtype)
        ones = torch.ones(got.shape[0], 1, dtype=weights.dtype, device=weights.device)
        return x, got[:, None], ones

    def combine(mod: nn.Module, args: tuple, y: torch.Tensor) -> torch.Tensor:
        order, T, k, w, dtype = state["order"], state["T"], state["k"], state["weights"], state["dtype"]
        back = y.new_empty(sum(state["send"]), y.shape[-1])
        back = all_to_all_autograd(back, y.contiguous(), state["send"], state["recv"], group=group)
        pairs = torch.empty_like(back).index_copy(0, order, back)  # pair p's output back at row p
        out = (pairs.view(T, k, -1).float() * w.float().unsqueeze(-1)).sum(1)
        state.clear()
        return out.to(dtype)

    module.register_forward_pre_hook(dispatch)
    module.register_forward_hook(combine)
