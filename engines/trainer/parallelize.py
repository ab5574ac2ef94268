"""`parallelize(model, cfg, meshes)`: the trainer's parallelism, applied from outside a
stock transformers MoE model, in one stated order (torchtitan's deepseek_v3
`parallelize` is the model followed):

1. expert parallel (fsdp2_ep): slice the routed experts over the expert-parallel group
   and hook in the all-to-all token exchange (expert_parallel.py). First, because it
   changes which expert weights a rank holds: everything after works on local slices.
2. activation checkpointing: transformers' own `activation_checkpointing_enable` (each
   decoder layer is a GradientCheckpointingLayer; non-reentrant, so the EP exchange
   and FSDP's hooks simply run again in the recompute, in the same order on every
   rank). Before compile and FSDP, so both see the checkpointed layers.
3. compile (optional): `nn.Module.compile` per decoder layer, in place, before FSDP so
   FSDP's hooks stay outside the compiled region (graph breaks stay at layer edges).
4. FSDP2: `fully_shard` the experts of each layer over the data-parallel ranks that
   hold the same experts (world / ep of them; gradients divided by the whole world,
   since every rank's tokens reach them), then each decoder layer, then the root
   (embeddings, final norm, lm_head). bf16 is FSDP2's MixedPrecisionPolicy: bf16
   compute, fp32 parameters (master weights), optimizer state and reductions.

Context parallel is not a module transform: rl_step shards each micro-batch's
sequences inside `context_parallel.sharded_sequences` (needs CUDA; see config.py).
The model class is never edited: only module hooks, public methods and FSDP2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from engines.trainer.config import TrainerConfig
from engines.trainer.expert_parallel import ExpertParallel, apply_expert_parallel, find_experts


@dataclass
class Meshes:
    """The ranks' layouts. `dense`: all ranks (FSDP of dense weights). `ep`: groups of
    consecutive ranks sharing one copy of all experts; `dp_mod_ep`: ranks holding the
    same experts (FSDP of experts). `cp`: ranks splitting one sequence; `dp`: ranks
    that read different data (world / cp)."""

    dense: DeviceMesh
    ep: DeviceMesh | None
    dp_mod_ep: DeviceMesh | None
    cp: DeviceMesh | None
    dp_rank: int
    dp_size: int


def build_meshes(cfg: TrainerConfig, device_type: str) -> Meshes:
    """Meshes over the default process group for `cfg` (call on every rank)."""
    world = dist.get_world_size()
    if world != cfg.processes:
        raise ValueError(f"trainer.processes={cfg.processes} but {world} ranks were launched: make them agree")
    dense = init_device_mesh(device_type, (world,), mesh_dim_names=("dense",))
    ep = dp_mod_ep = cp = None
    if cfg.parallelism == "fsdp2_ep":
        n = cfg.expert_parallel_size
        grid = init_device_mesh(device_type, (world // n, n), mesh_dim_names=("dp_mod_ep", "ep"))
        ep, dp_mod_ep = grid["ep"], grid["dp_mod_ep"]
    dp_rank, dp_size = dist.get_rank(), world
    if cfg.context_parallel_size > 1:
        c = cfg.context_parallel_size
        grid = init_device_mesh(device_type, (world // c, c), mesh_dim_names=("dp", "cp"))
        cp, dp_rank, dp_size = grid["cp"], grid["dp"].get_local_rank(), world // c
    return Meshes(dense, ep, dp_mod_ep, cp, dp_rank, dp_size)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (`model.model.layers`)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__} has no model.layers: parallelize needs a transformers causal LM")
    return layers


def parallelize(model: nn.Module, cfg: TrainerConfig, meshes: Meshes | None) -> ExpertParallel | None:
    """Apply cfg's parallelism to `model` in place (order in the module docstring).
    Returns where the experts went (None without expert parallel). Under ddp
    (`meshes` None) only checkpointing and compile apply; Accelerate wraps DDP after."""
    ep = None
    if cfg.parallelism == "fsdp2_ep":
        ep = apply_expert_parallel(model, meshes.ep.get_group())
    if cfg.activation_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.compile:
        for layer in decoder_layers(model):
            layer.compile()
    if cfg.parallelism != "ddp":
        _fully_shard(model, cfg, meshes, ep)
    return ep


def _fully_shard(model: nn.Module, cfg: TrainerConfig, meshes: Meshes, ep: ExpertParallel | None) -> None:
    bf16 = cfg.mixed_precision == "bf16"
    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    )
    if ep is not None:
        world = dist.get_world_size()
        for experts in find_experts(model).values():
            # A size-1 mesh when ep == world: FSDP then only casts (bf16) and divides.
            fully_shard(experts, mesh=meshes.dp_mod_ep, mp_policy=mp)
            # Each expert's gradient already sums every rank's tokens (the all-to-all
            # backward); rl_step scales each rank's loss by world for averaging
            # reductions, so divide by the whole world, not by the dp_mod_ep size.
            experts.set_gradient_divide_factor(float(world))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=meshes.dense, mp_policy=mp)
    fully_shard(model, mesh=meshes.dense, mp_policy=mp)
