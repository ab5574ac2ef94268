"""Every knob of the trainer, in one pydantic model with a description per field.

Defaults learn on the tiny CPU model (shared/REFERENCE.md: AdamW lr 2e-3, batch 32,
fp32 for SFT); RL uses a smaller learning rate because its gradient is noisier and
the policy must stay close to the one that generated the episodes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

    @model_validator(mode="after")
    def _bounded(self) -> SFTConfig:
        if self.max_steps is None and self.max_seconds is None:
            raise ValueError("sft: set max_steps or max_seconds (or both) so training ends")
        if self.schedule == "cosine" and self.max_steps is None:
            raise ValueError("sft.schedule = 'cosine' decays to max_steps: set sft.max_steps, or use schedule = 'constant'")
        return self


class TrainerConfig(BaseModel):
    """How one RL optimizer step is computed, and how weights and state are kept."""

    model_config = ConfigDict(extra="forbid")

    # Optimizer
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate for RL (10x below SFT: noisier gradient, stay on-policy).")
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
    micro_batch_rows: int = Field(4, ge=1, description="Packed rows per forward/backward pass (memory bound).")
    packing: bool = Field(
        True, description="Pack several episodes per row (attention kept inside each). False: one episode per row."
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
        0.0, ge=0, description="Weight of the squared log-ratio term 0.5*(log p - log q)^2 against the inference policy."
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the rollouts; logits are divided by it so logprobs match."
    )
    std_scale_advantages: bool = Field(
        False, description="Divide group advantages by the group's reward standard deviation (GRPO); False: Dr.GRPO."
    )
    negative_advantage_scale: float = Field(
        1.0, ge=0, le=1,
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

    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(max_seconds=180), description="Warm-start SFT settings."
    )

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas: both must be in [0, 1), got {self.betas}")
        return self
