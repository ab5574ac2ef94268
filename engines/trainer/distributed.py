"""Build the Trainee a lane trains: its model wrapped or sharded per
`trainer.parallelism`, optimizer, scheduler, router replay, and the collective
helpers rl_step and the lane call.

- ddp (default; tested on CPU): `Accelerator(cpu=True)` under torchrun runs DDP over
  gloo; without `cpu=True` each rank silently trains alone (shared/REFERENCE.md). bf16
  is Accelerate's autocast (fp32 weights, fp32 gradient all-reduce).
- fsdp2 / fsdp2_ep: engines/trainer/parallelize.py applies expert parallel,
  activation checkpointing, compile and torch's `fully_shard` from outside the model
  (Accelerate's FSDP2 plugin does not run on CPU; torch's function does). Accelerate
  still owns the process group, RNG and scheduler state; each rank saves its own
  parameter and optimizer shards (sharded_state.py).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch import nn

from engines.model.load import empty_moe_causal_lm, load_moe_causal_lm, local_model_dir
from engines.trainer.config import TrainerConfig
from engines.trainer.expert_parallel import ExpertParallel
from engines.trainer.full_state import full_state_dict
from engines.trainer.grad_clip import clip_grad_norm
from engines.trainer.parallelize import build_meshes, parallelize
from engines.trainer.rl_step import Trainee, make_optimizer
from engines.trainer.router_replay import RouterReplay
from engines.trainer.sharded_load import fill_sharded, fp8_block
from engines.trainer.sharded_state import load_shard, save_shard


def make_accelerator(mixed_precision: str = "fp32", parallelism: str = "ddp") -> Accelerator:
    """An Accelerator that really joins the torchrun process group on CPU machines.
    Its autocast is used only under ddp (FSDP2 casts through its own policy)."""
    autocast = "bf16" if mixed_precision == "bf16" and parallelism == "ddp" else "no"
    return Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=autocast)


def make_trainee(
    model: nn.Module,
    cfg: TrainerConfig,
    accelerator: Accelerator,
    model_dir: str | Path | None = None,
    decay_steps: int | None = None,
) -> Trainee:
    """The Trainee for `cfg.parallelism` (every rank calls this). A model on the meta
    device (`load_model`'s under fsdp2) is filled from `model_dir` once sharded.
    `decay_steps`: the learning rate's cosine decay (make_optimizer; SFT's schedule)."""
    if accelerator.num_processes != cfg.processes:
        raise ValueError(
            f"trainer.processes={cfg.processes} but {accelerator.num_processes} ranks were launched: make them agree"
        )
    if cfg.parallelism == "ddp":
        return ddp_trainee(model, cfg, accelerator, decay_steps)
    return sharded_trainee(model, cfg, accelerator, model_dir, decay_steps)


def load_model(model_dir: str | Path, cfg: TrainerConfig) -> nn.Module:
    """The model a rank starts from: whole in fp32 under ddp (each rank holds a replica);
    under fsdp2 / fsdp2_ep with its parameters on the meta device, each rank reading only
    its shard of the weights once sharded (sharded_load.py). A block-FP8 checkpoint is
    de-quantised to fp32 as it is read."""
    local = local_model_dir(model_dir)  # an s3:// model is copied once
    if cfg.parallelism == "ddp" and fp8_block(local) is None:
        return load_moe_causal_lm(local)
    model = empty_moe_causal_lm(local)
    if cfg.parallelism == "ddp":  # a block-FP8 checkpoint, de-quantised whole for each replica
        fill_sharded(model, local, torch.device("cpu"), None)
    return model


def ddp_trainee(
    model: nn.Module, cfg: TrainerConfig, accelerator: Accelerator, decay_steps: int | None = None
) -> Trainee:
    """Wrap `model` for data parallel training (DDP when world > 1) with AdamW."""
    parallelize(model, cfg, None)  # activation checkpointing and compile only
    opt, sched = make_optimizer(model, cfg, decay_steps=decay_steps)
    wrapped, opt = accelerator.prepare(model, opt)
    # The scheduler is not prepared: Accelerate's wrapper would step it once per process.
    accelerator.register_for_checkpointing(sched)
    module = accelerator.unwrap_model(wrapped)
    return Trainee(
        model=wrapped,
        module=module,
        optimizer=opt,
        scheduler=sched,
        replay=RouterReplay(module, replay=cfg.router_replay != "off"),
        rank=accelerator.process_index,
        world=accelerator.num_processes,
        device=accelerator.device,
        backward=accelerator.backward,
        no_sync=lambda: accelerator.no_sync(wrapped),
        # NCCL reduces device tensors only: metrics go to the rank's device and back.
        all_sum=lambda t: accelerator.reduce(t.to(accelerator.device), "sum").cpu(),
    )


def _all_sum(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    t = t.to(device, copy=True)  # NCCL reduces device tensors only
    dist.all_reduce(t)
    return t.cpu()


def sharded_trainee(
    model: nn.Module,
    cfg: TrainerConfig,
    accelerator: Accelerator,
    model_dir: str | Path | None = None,
    decay_steps: int | None = None,
) -> Trainee:
    """FSDP2 (and expert parallel) through `parallelize`, over the launched ranks. A
    model on the meta device is sharded first, then each rank reads its shard."""
    meshes = build_meshes(cfg, accelerator.device.type)
    on_meta = any(p.is_meta for p in model.parameters())
    if on_meta and model_dir is None:
        raise ValueError("a model on the meta device needs the checkpoint folder its shards are read from")
    if not on_meta:
        model.to(accelerator.device)
    replay = RouterReplay(model, replay=cfg.router_replay != "off")  # hooks on routers, before FSDP wraps
    ep = parallelize(model, cfg, meshes)
    if on_meta:
        fill_sharded(model, model_dir, accelerator.device, ep)
    opt, sched = make_optimizer(model, cfg, decay_steps=decay_steps)
    accelerator.register_for_checkpointing(sched)
    layout = {"processes": cfg.processes, "parallelism": cfg.parallelism, "ep": cfg.expert_parallel_size}
    seq = None
    if meshes.cp is not None:
        from engines.trainer.context_parallel import sharded_sequences

        seq = partial(sharded_sequences, meshes.cp)
    return Trainee(
        model=model,
        module=model,
        optimizer=opt,
        scheduler=sched,
        replay=replay,
        rank=dist.get_rank(),
        world=dist.get_world_size(),
        device=accelerator.device,
        all_sum=partial(_all_sum, device=accelerator.device),
        dp_rank=meshes.dp_rank,
        dp_world=meshes.dp_size,
        clip=partial(_clip, model, ep),
        sequence_context=seq,
        full_state=partial(full_state_dict, model, ep),
        save_local=lambda d: save_shard(model, opt, Path(d), dist.get_rank(), layout),
        load_local=lambda d: load_shard(model, opt, Path(d), dist.get_rank(), layout),
    )


def _clip(model: nn.Module, ep: ExpertParallel | None, max_norm: float) -> float:
    experts = [p for m in ep.modules for p in m.parameters()] if ep else []
    return clip_grad_norm(model.parameters(), max_norm, experts, ep.group if ep else None)
