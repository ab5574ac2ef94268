"""Parallelism applied from outside a plain transformers model.

- Data parallel (the default, tested on CPU): `Accelerator(cpu=True)` under torchrun
  runs DDP over gloo; without `cpu=True` each rank silently trains alone
  (shared/REFERENCE.md). On GPUs the same code runs DDP over NCCL.
- FSDP2: torch's `fully_shard` per decoder layer, then the root (Accelerate's FSDP2
  plugin does not run on CPU, torch's function does).
- Expert parallel: transformers' own `DistributedConfig(ep_size=...)` at load time,
  which shards the fused expert tensors and exchanges tokens with all-to-all.
- GPU clusters: `accelerate_fsdp2_plugin` / `parallelism_config` build Accelerate's
  FSDP2 and ParallelismConfig (data-shard, context parallel) objects from a small
  pydantic config, validated against the world size before any launch.
"""

from __future__ import annotations

import os

import torch
from accelerate import Accelerator
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from engines.trainer.config import TrainerConfig
from engines.trainer.rl_step import Trainee, make_optimizer
from engines.trainer.router_replay import RouterReplay


def make_accelerator(**kwargs) -> Accelerator:
    """An Accelerator that really joins the torchrun process group on CPU machines."""
    return Accelerator(cpu=not torch.cuda.is_available(), **kwargs)


def ddp_trainee(model: nn.Module, cfg: TrainerConfig, accelerator: Accelerator) -> Trainee:
    """Wrap `model` for data parallel training (DDP when world > 1) with AdamW."""
    opt, sched = make_optimizer(model, cfg)
    wrapped, opt = accelerator.prepare(model, opt)
    # The scheduler is not prepared: Accelerate's wrapper would step it once per process.
    accelerator.register_for_checkpointing(sched)
    module = accelerator.unwrap_model(wrapped)
    return Trainee(
        model=wrapped,
        module=module,
        optimizer=opt,
        scheduler=sched,
        replay=RouterReplay(module),
        rank=accelerator.process_index,
        world=accelerator.num_processes,
        backward=accelerator.backward,
        no_sync=lambda: accelerator.no_sync(wrapped),
        all_sum=lambda t: accelerator.reduce(t, "sum"),
    )


def _all_sum(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    torch.distributed.all_reduce(t)
    return t


def fsdp2_trainee(model: nn.Module, cfg: TrainerConfig) -> Trainee:
    """Shard `model` with torch FSDP2 (`fully_shard`) over the default process group."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt, sched = make_optimizer(model, cfg)
    return Trainee(
        model=model, module=model, optimizer=opt, scheduler=sched, replay=RouterReplay(model),
        rank=torch.distributed.get_rank(), world=torch.distributed.get_world_size(), all_sum=_all_sum,
    )  # fmt: skip


def expert_parallel_trainee(model_dir: str, cfg: TrainerConfig, ep_size: int) -> Trainee:
    """Load `model_dir` with its experts split over `ep_size` ranks (transformers'
    DistributedConfig: all-to-all token dispatch) and FSDP over the same ranks."""
    from transformers.distributed import DistributedConfig

    from engines.model.load import load_moe_causal_lm

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = DistributedConfig(fsdp_size=world, ep_size=ep_size)
    model = load_moe_causal_lm(model_dir, distributed_config=dist)
    opt, sched = make_optimizer(model, cfg)
    return Trainee(
        model=model, module=model, optimizer=opt, scheduler=sched, replay=RouterReplay(model),
        rank=torch.distributed.get_rank(), world=world, all_sum=_all_sum,
    )  # fmt: skip


class ClusterParallelism(BaseModel):
    """How a GPU cluster run splits its ranks (Accelerate FSDP2 + ParallelismConfig)."""

    model_config = ConfigDict(extra="forbid")

    world_size: int = Field(..., ge=1, description="Total ranks (GPUs) of the launch.")
    dp_replicate_size: int = Field(1, ge=1, description="Replicas of the sharded model (HSDP across nodes).")
    dp_shard_size: int = Field(1, ge=1, description="Ranks one replica's parameters are sharded over (FSDP2).")
    cp_size: int = Field(1, ge=1, description="Context-parallel ranks splitting each sequence (long episodes).")
    tp_size: int = Field(1, ge=1, description="Tensor-parallel ranks.")
    mixed_precision: bool = Field(True, description="bf16 parameters and reduce in fp32 (FSDP2 MixedPrecisionPolicy).")
    activation_checkpointing: bool = Field(True, description="Recompute decoder layers in backward to save memory.")
    cpu_offload: bool = Field(False, description="Offload sharded parameters to host memory.")

    @model_validator(mode="after")
    def _sizes(self) -> ClusterParallelism:
        product = self.dp_replicate_size * self.dp_shard_size * self.cp_size * self.tp_size
        if product != self.world_size:
            raise ValueError(
                f"dp_replicate_size*dp_shard_size*cp_size*tp_size = {product} but world_size = {self.world_size}: "
                "make the product of the sizes equal the number of ranks"
            )
        if self.dp_replicate_size > 1 and self.dp_shard_size == 1:
            raise ValueError("dp_replicate_size > 1 needs dp_shard_size > 1 (HSDP); for plain replication use DDP")
        return self


def parallelism_config(p: ClusterParallelism):
    """Accelerate's ParallelismConfig for `p` (validated by Accelerate on construction)."""
    from accelerate.parallelism_config import ParallelismConfig

    return ParallelismConfig(
        dp_replicate_size=p.dp_replicate_size, dp_shard_size=p.dp_shard_size, cp_size=p.cp_size, tp_size=p.tp_size
    )


def accelerate_fsdp2_plugin(p: ClusterParallelism, layer_class: str = "Qwen3MoeDecoderLayer"):
    """Accelerate's FSDP2 plugin: one FSDP unit per decoder layer, full state dicts on save."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        reshard_after_forward=True,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=[layer_class],
        state_dict_type="FULL_STATE_DICT",
        activation_checkpointing=p.activation_checkpointing,
        cpu_ram_efficient_loading=True,
        mixed_precision_policy="bf16" if p.mixed_precision else None,
        cpu_offload=p.cpu_offload,
    )


def accelerate_launch_config(p: ClusterParallelism, layer_class: str = "Qwen3MoeDecoderLayer") -> dict:
    """The `accelerate launch --config_file` YAML content for `p`, as a dict."""
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "num_processes": p.world_size,
        "mixed_precision": "bf16" if p.mixed_precision else "no",
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": True,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": layer_class,
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_activation_checkpointing": p.activation_checkpointing,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": p.cpu_offload,
        },
        "parallelism_config": {
            "parallelism_config_dp_replicate_size": p.dp_replicate_size,
            "parallelism_config_dp_shard_size": p.dp_shard_size,
            "parallelism_config_cp_size": p.cp_size,
            "parallelism_config_tp_size": p.tp_size,
        },
    }
