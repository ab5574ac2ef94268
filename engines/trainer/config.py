"""Every knob of the trainer, in one pydantic model with a description per field.

Defaults learn on the tiny CPU model (shared/REFERENCE.md: AdamW lr 2e-3, batch 32,
fp32 for SFT); RL uses a smaller learning rate because its gradient is noisier and
the policy must stay close to the one that generated the episodes.
"""

from __future__ import annotations

import copy
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from engines.trainer.warm_start_cache import SFT_PLACEMENT_FIELDS, SFT_TRAINER_FIELDS


class SFTConfig(BaseModel):
    """Warm-start supervised fine-tuning on demonstrations (loss on assistant tokens)."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(2e-3, gt=0, description="AdamW learning rate for SFT (2e-3 learns the micro tasks in minutes).")
    batch_size: int = Field(32, ge=1, description="Conversations per optimizer step.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps (None: no step bound).")
    max_seconds: float | None = Field(
        None, gt=0, description="Stop after this many wall seconds (None: no time bound). Set this or max_steps."
    )
    warmup_steps: int = Field(10, ge=0, description="Linear learning-rate warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine"] = Field(
        "constant",
        description="Learning rate after warm-up: constant, or a cosine decay to 10% of lr at max_steps (needs max_steps).",
    )
    log_every: int = Field(10, ge=1, description="Print a progress line every this many steps.")
    freeze_embeddings: bool = Field(
        False,
        description="Keep the token embeddings and the output layer (one matrix when tied, as in the tiny model) as "
        "they are; SFT trains the rest. "
        "Each step pushes down the logit of every token its targets do not hold, through that token's output "
        "vector: a token the demonstrations never ask for (a never-trained project's ` S` `chema` of `Schema`) "
        "ends too unlikely to copy. On a project never trained on, the tiny model's first view named the hinted "
        "function in 40% of episodes after the repository SFT and in 76.7% with the embeddings kept "
        "(docs/2026-12-06-real-task-gate.md, X21).",
    )

    @model_validator(mode="after")
    def _bounded(self) -> SFTConfig:
        if self.max_steps is None and self.max_seconds is None:
            raise ValueError("sft: set max_steps or max_seconds (or both) so training ends")
        if self.schedule == "cosine" and self.max_steps is None:
            raise ValueError(
                "sft.schedule = 'cosine' decays to max_steps: set sft.max_steps, or use schedule = 'constant'"
            )
        return self


class TrainerConfig(BaseModel):
    """How one RL optimizer step is computed, and how weights and state are kept."""

    model_config = ConfigDict(extra="forbid")

    # Optimizer
    lr: float = Field(
        2e-4, gt=0, description="AdamW learning rate for RL (10x below SFT: noisier gradient, stay on-policy)."
    )
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas (momentum, second-moment decay).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up in optimizer steps, then constant.")
    grad_clip: float = Field(1.0, gt=0, description="Clip the global gradient norm to this value.")

    # Batching
    seq_len: int = Field(
        1024,
        ge=16,
        description="Length of one packed row in tokens; episodes are packed into rows of this length. "
        "An episode longer than this is an error (raise seq_len).",
    )
    micro_batch_rows: int = Field(
        4,
        ge=1,
        description="Rows per forward/backward pass (memory bound): packed rows of seq_len, or unpacked, as many "
        "episodes of similar length as fit micro_batch_rows x seq_len tokens padded to the longest.",
    )
    packing: bool = Field(
        True,
        description="Pack several episodes per row (attention kept inside each, through a block mask). False: one "
        "episode per row, padded at its end, with no mask (the causal kernel: 2x faster on CPU for short episodes).",
    )
    shared_prompts: Literal["auto", "off"] = Field(
        "auto",
        description="auto: the samples of a group that share a prompt run it once, in one forward whose keys and "
        "values they all attend to (engines/trainer/shared_prompts.py): the same loss and gradients for about half "
        "the work when prompts are half of an episode. Applies with one trainer process and no activation "
        "checkpointing, context parallel or aux loss; otherwise each sample carries its prompt, as with off.",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=0,
        description="Tokens per chunk of the output head: logprobs and entropy are computed from the last hidden "
        "states this many tokens at a time, recomputed in backward, so the head's memory stays at about two "
        "[chunk, vocab] fp32 tensors at any sequence length (engines/trainer/chunked_logprobs.py). 0: the full "
        "[rows, seq_len, vocab] logits as one tensor, about four of them at peak. 1024: as fast as 512 to 4096 "
        "within noise on CPU at 4k tokens, and 0.5x the full path's time at 8k (benchmarks/long_context.py); the "
        "head's peak is then 1.2 GB at a 152k vocabulary, where the full path's is 20 GB at 8k tokens.",
    )

    # Objective
    loss_type: Literal["masked_ratio", "ppo_clip", "tis"] = Field(
        "masked_ratio",
        description="masked_ratio: importance-weighted policy gradient with tokens masked when the ratio left "
        "its bounds in the direction of the advantage (prime-rl style); ppo_clip: clipped surrogate (PPO/GRPO); "
        "tis: truncated importance sampling (ratio capped at ratio_high, not masked).",
    )
    ratio_low: float = Field(0.8, gt=0, le=1, description="Lower bound of the trainer/inference probability ratio.")
    ratio_high: float = Field(1.2, ge=1, description="Upper bound of the ratio (the cap for tis).")
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the squared log-ratio term 0.5*(log p - log q)^2 against the inference policy.",
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the rollouts; logits are divided by it so logprobs match."
    )
    std_scale_advantages: bool = Field(
        False, description="Divide group advantages by the group's reward standard deviation (GRPO); False: Dr.GRPO."
    )
    negative_advantage_scale: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Weight of below-mean episodes' advantages (1: plain group baseline; 0: learn only from episodes "
        "that beat their group, as rejection-sampling fine-tuning).",
    )
    router_replay: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Route each token to the experts recorded at inference (gate weights from live logits). "
        "auto: when every episode has routes; on: require them; off: live routing.",
    )
    aux_loss_coef: float = Field(0.0, ge=0, description="Weight of the load-balancing auxiliary loss (0: off).")
    seed: int = Field(0, description="Seed of torch's generators (set once per process, saved in the state).")

    # Outputs
    export_format: Literal["fp32", "bf16", "fp8"] = Field(
        "fp32",
        description="Exported weights: fp32 (CPU serving), bf16, or fp8 (e4m3 with 128x128 block scales, GPU vLLM).",
    )
    keep_last_states: int = Field(2, ge=1, description="Resumable trainer states kept on disk (older ones deleted).")

    # Parallelism (engines/trainer/parallelize.py applies it; see its docstring for the order)
    processes: int = Field(
        1,
        ge=1,
        description="Trainer ranks: 1 trains in the lane's process; more run the lane under torchrun "
        "(one rank per process: a GPU each on GPU machines, a gloo rank on CPU).",
    )
    nodes: int = Field(
        1,
        ge=1,
        description="Machines the trainer's ranks span: processes / nodes ranks on each, one trainer lane per "
        "node (each a run of lanes.trainer_deployment, node_rank set per run), joined by torchrun's static "
        "rendezvous at `rendezvous`. Needs the lanes deployed (lanes.trainer_deployment).",
    )
    node_rank: int = Field(
        0,
        ge=0,
        description="This node's place among `nodes` (node 0 holds global rank 0, which publishes). Set per "
        "node by the run; leave 0 in a configuration file.",
    )
    rendezvous: str | None = Field(
        None,
        description="host:port where node 0's torchrun agent meets the others (nodes > 1): an address of the "
        "machine that serves lanes.trainer_deployment's node 0, reachable from the other nodes.",
    )
    devices: list[int] | None = Field(
        None,
        description="GPUs of this node the trainer ranks run on, one per rank (trainer.processes of them), given "
        "to the lane process or torchrun as CUDA_VISIBLE_DEVICES; rank r takes the r-th. None: in a run, the GPUs "
        "after the servers' (the device plan, flows/devices.py); on a node of its own, the first ones.",
    )
    share_devices: bool = Field(
        False,
        description="Let the trainer run on GPUs the local servers also use (a small model on a one-GPU node; "
        "inference.kv_cache_gb bounds vLLM's share of the memory). False: a GPU listed by both inference.devices "
        "and trainer.devices is refused, and the default plan gives the trainer GPUs of its own.",
    )
    parallelism: Literal["ddp", "fsdp2", "fsdp2_ep"] = Field(
        "ddp",
        description="ddp: every rank holds the whole model (Accelerate DDP). fsdp2: torch fully_shard per decoder "
        "layer, then the root (parameters, gradients and optimizer state sharded over the ranks). fsdp2_ep: "
        "fsdp2 for dense weights plus routed experts split over expert_parallel_size ranks with all-to-all "
        "token dispatch (each rank stores 1/expert_parallel_size of the experts).",
    )
    expert_parallel_size: int = Field(
        1,
        ge=1,
        description="Ranks one layer's routed experts are split over (fsdp2_ep only; divides processes "
        "and the expert count).",
    )
    context_parallel_size: int = Field(
        1,
        ge=1,
        description="Ranks that split each row's sequence (ring attention, torch context_parallel) for "
        "long episodes; 1: off. Needs CUDA GPUs, fsdp2 or fsdp2_ep, and packing off.",
    )
    mixed_precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="fp32 everywhere, or bf16 compute with fp32 master weights, optimizer state and gradient "
        "reductions (FSDP2 MixedPrecisionPolicy; autocast under ddp). fp32 is faster on CPU.",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer in backward instead of keeping its activations "
        "(about a third more compute for activation memory of one layer).",
    )
    compile: bool = Field(
        False,
        description="torch.compile each decoder layer (GPU runs; on CPU the first steps compile C++ for minutes).",
    )

    sft: SFTConfig = Field(default_factory=lambda: SFTConfig(max_seconds=180), description="Warm-start SFT settings.")

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas: both must be in [0, 1), got {self.betas}")
        self._check_parallelism()
        if self.devices is not None:
            self._check_devices(self.devices)
        return self

    def sft_unsupported(self) -> str | None:
        """Why supervised fine-tuning cannot honour these settings, naming the field and the
        fix (None: it can). SFT starts its ranks on this machine and trains whole rows."""
        if self.nodes > 1:
            return (
                f"trainer.nodes = {self.nodes}: SFT starts its trainer.processes ranks on this machine; "
                "set trainer.nodes = 1 for it"
            )
        if self.context_parallel_size > 1:
            return (
                f"trainer.context_parallel_size = {self.context_parallel_size}: SFT gives each rank whole rows; "
                "set it to 1 (parallelism = 'fsdp2' shards the model instead)"
            )
        return None

    def _check_devices(self, devices: list[int]) -> None:
        if any(d < 0 for d in devices) or len(set(devices)) < len(devices):
            raise ValueError(f"devices {devices}: list GPU indices of this node (0, 1, ...), each once")
        if len(devices) != self.processes:
            raise ValueError(
                f"devices lists {len(devices)} GPU(s) for {self.processes} trainer rank(s) (processes): one GPU per "
                "rank; list that many, or leave devices unset"
            )

    def _check_nodes(self) -> None:
        if self.node_rank >= self.nodes:
            raise ValueError(f"node_rank={self.node_rank} with nodes={self.nodes}: node ranks run 0 to nodes - 1")
        if self.nodes == 1:
            if self.rendezvous is not None:
                raise ValueError("rendezvous is for trainers over several machines: set nodes > 1, or unset it")
            return
        if self.processes % self.nodes:
            raise ValueError(
                f"processes={self.processes} over nodes={self.nodes}: processes counts every rank of every node, "
                "the same number on each; make it a multiple of nodes"
            )
        host, sep, port = (self.rendezvous or "").rpartition(":")
        if not (sep and host and port.isdigit()):
            raise ValueError(
                f"rendezvous={self.rendezvous!r}: nodes={self.nodes} need node 0's address as host:port "
                "(e.g. trainer-0.cluster:29500), where every node's torchrun meets"
            )

    def _check_parallelism(self) -> None:
        self._check_nodes()
        ep, cp, n = self.expert_parallel_size, self.context_parallel_size, self.processes
        if self.parallelism == "fsdp2_ep" and ep < 2:
            raise ValueError("expert_parallel_size: fsdp2_ep needs at least 2 (or use parallelism='fsdp2')")
        if self.parallelism != "fsdp2_ep" and ep > 1:
            raise ValueError(
                f"expert_parallel_size={ep} needs parallelism='fsdp2_ep' (got {self.parallelism!r}): set both"
            )
        if n % (ep * cp):
            raise ValueError(
                f"processes ({n}) must be a multiple of expert_parallel_size x context_parallel_size ({ep} x {cp})"
            )
        if self.parallelism != "ddp" and n < 2:
            raise ValueError(f"parallelism={self.parallelism!r} shards over ranks: set processes >= 2 (or use 'ddp')")
        if cp > 1:
            if self.parallelism == "ddp":
                raise ValueError("context_parallel_size > 1 needs parallelism='fsdp2' or 'fsdp2_ep'")
            if self.packing:
                raise ValueError(
                    "context_parallel_size > 1 with packing=True: torch's context parallel shards plain causal "
                    "attention, not packed rows' block masks; set packing=False"
                )
            if self.seq_len % (2 * cp):
                raise ValueError(f"seq_len ({self.seq_len}) must be a multiple of 2 x context_parallel_size ({2 * cp})")
            import torch  # here, not at the top: a run's configuration is read where torch never is

            if not torch.cuda.is_available():
                raise ValueError(
                    f"context_parallel_size={cp} needs CUDA GPUs: torch's context parallel rewrites the flash, "
                    "efficient and cuDNN attention kernels into ring attention over NCCL, and CPU/gloo has none of "
                    "them. Use context_parallel_size=1 here (`python scripts/gpu_check.py --checks trainer_cp` "
                    "exercises it on a GPU machine)"
                )


# Where the `tandem sft` settings of RL-only keys live instead.
_SFT_INSTEAD = {"lr": "sft.lr", "warmup_steps": "sft.warmup_steps"}
# The trainer settings `tandem sft` reads besides sft.*: those that make its weights and where its ranks run.
SFT_COMMAND_FIELDS = (*SFT_TRAINER_FIELDS, *SFT_PLACEMENT_FIELDS)
# Keys of the trainer's own path that SFT cannot honour (TrainerConfig.sft_unsupported).
_SFT_CANNOT = {
    "nodes": "its ranks all run on this machine",
    "node_rank": "its ranks all run on this machine",
    "rendezvous": "its ranks all run on this machine",
    "context_parallel_size": "each rank trains whole rows; parallelism = 'fsdp2' shards the model",
}


def _refusal(key: str) -> str:
    instead = _SFT_INSTEAD.get(key)
    fix = f"use {instead}" if instead else "remove it"
    why = _SFT_CANNOT.get(key, "it configures RL steps or the trainer lane")
    return f"tandem sft does not read {key} ({why}; SFT reads {', '.join(SFT_COMMAND_FIELDS)} and sft.*): {fix}"


class _SFTCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # TrainerConfig's other fields, refused by name with the reason (flows/config_loader.py reads it).
    refused_keys: ClassVar[dict[str, str]] = {
        k: _refusal(k) for k in TrainerConfig.model_fields if k not in (*SFT_COMMAND_FIELDS, "sft")
    }

    def trainer(self) -> TrainerConfig:
        """The TrainerConfig engines/trainer/sft.py takes (its other fields at their defaults)."""
        return TrainerConfig(**self.model_dump())


# `tandem sft`'s configuration: exactly the TrainerConfig fields supervised fine-tuning
# reads (engines/trainer/sft.py), with TrainerConfig's own defaults and descriptions.
SFTCommandConfig = create_model(
    "SFTCommandConfig",
    __base__=_SFTCommand,
    __module__=__name__,
    __doc__="The trainer settings `tandem sft` reads: its optimizer, rows, seed, ranks, parallelism, precision, "
    "devices and export, and the SFT section.",
    **{
        k: (f.annotation, copy.deepcopy(f))
        for k, f in TrainerConfig.model_fields.items()
        if k in (*SFT_COMMAND_FIELDS, "sft")
    },
)
