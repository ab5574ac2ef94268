"""The RL objective at token level, against the logprobs inference sampled with.

For each loss token t with trainer logprob lp_t (with gradient), inference logprob
q_t and advantage A_t, ratio r_t = exp(lp_t - q_t):

- masked_ratio (prime-rl style, default): loss_t = -r_t * A_t, with the token masked
  (loss and gradient 0) when the ratio already moved past its bound in the direction
  the advantage pushes: A > 0 and r > ratio_high, or A < 0 and r < ratio_low.
  The gradient is the importance-weighted policy gradient r_t * A_t * d lp_t.
- ppo_clip: loss_t = -min(r_t * A_t, clip(r_t, ratio_low, ratio_high) * A_t).
- tis: loss_t = -min(r_t, ratio_high).detach() * A_t * lp_t (truncated importance
  sampling: capped weight, never masked).
plus kl_coef * 0.5 * (lp_t - q_t)^2 on every loss token.

Losses are returned as sums over tokens; the caller divides by the global number of
loss tokens (all ranks, all micro-batches), so packing and data parallelism do not
change the objective. Metrics are sums too, for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engines.trainer.config import TrainerConfig


@dataclass
class LossSums:
    loss: torch.Tensor  # scalar, sum over loss tokens (has grad)
    tokens: int  # loss tokens in this batch
    masked: float  # tokens masked / clipped / truncated
    mismatch_kl: float  # sum of r - 1 - log r: KL(inference || trainer) estimator (k3)


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each target and the entropy of each position's distribution.

    logits [..., V], targets [...] -> (logprobs [...], entropy [...]), in fp32.
    Logits are divided by the sampling temperature so they describe the same
    distribution inference sampled from.
    """
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return lp, entropy


def rl_loss_sums(
    logprobs: torch.Tensor,
    inference_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    cfg: TrainerConfig,
) -> LossSums:
    """Sum of the per-token RL loss over `loss_mask` tokens (all inputs the same shape)."""
    m = loss_mask.bool()
    lp, q, a = logprobs[m], inference_logprobs[m].float(), advantages[m].float()
    log_ratio = lp - q
    ratio = torch.exp(log_ratio)
    if cfg.loss_type == "masked_ratio":
        moved = ((a > 0) & (ratio > cfg.ratio_high)) | ((a < 0) & (ratio < cfg.ratio_low))
        per_token = -(ratio * a) * (~moved)
    elif cfg.loss_type == "ppo_clip":
        clipped = torch.clamp(ratio, cfg.ratio_low, cfg.ratio_high)
        moved = (ratio < cfg.ratio_low) | (ratio > cfg.ratio_high)
        per_token = -torch.minimum(ratio * a, clipped * a)
    else:  # tis
        moved = ratio > cfg.ratio_high
        per_token = -torch.clamp(ratio, max=cfg.ratio_high).detach() * a * lp
    if cfg.kl_coef > 0:
        per_token = per_token + cfg.kl_coef * 0.5 * log_ratio.pow(2)
    with torch.no_grad():
        kl = (ratio - 1 - log_ratio).sum().item()
    return LossSums(per_token.sum(), int(m.sum().item()), float(moved.sum().item()), kl)
