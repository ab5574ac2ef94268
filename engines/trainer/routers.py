"""Each transformers MoE router's gate-weight formula, for replaying recorded routes.

A router maps a token's logits over E experts to (indices [T, k], weights [T, k]).
Replay keeps the recorded indices and recomputes the weights the router itself would
give those experts, from the live logits, so the router still gets a gradient. The
selection rule (group-limited top-k, the correction bias) does not enter: it only
decides which experts, and the recorded routes already say that.

Families (class name -> formula), read from transformers 5's modeling files:

- softmax over all experts, gathered, renormalised when `norm_topk_prob`:
  Qwen3-MoE (`Qwen3MoeTopKRouter`), Qwen2-MoE, OLMoE.
- softmax over the chosen experts' logits (top-k first): Mixtral (`MixtralTopKRouter`
  always renormalises the top-k of a full softmax, the same thing) and GPT-OSS
  (`GptOssTopKRouter`, logits include the router bias).
- sigmoid scores, gathered, renormalised when `norm_topk_prob` (+1e-20), times
  `routed_scaling_factor`: DeepSeek-V3 (`DeepseekV3TopkRouter`), GLM-4.5 MoE
  (`Glm4MoeTopkRouter`) and GLM-5 (`GlmMoeDsaTopkRouter`). The correction bias only
  enters the choice.

A router class not in the table is refused by name: a wrong formula trains silently.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

# (router, logits [T, E], routes [T, k]) -> weights [T, k] (float32, with gradient)
GateWeights = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def softmax_all(router: nn.Module, logits: torch.Tensor, routes: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(logits.float(), dim=-1).gather(-1, routes)
    if getattr(router, "norm_topk_prob", False):
        w = w / w.sum(-1, keepdim=True)
    return w


def softmax_chosen(router: nn.Module, logits: torch.Tensor, routes: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float().gather(-1, routes), dim=-1)


def sigmoid_scaled(router: nn.Module, logits: torch.Tensor, routes: torch.Tensor) -> torch.Tensor:
    w = logits.float().sigmoid().gather(-1, routes)
    if router.norm_topk_prob:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * router.routed_scaling_factor


FORMULAS: dict[str, GateWeights] = {
    "Qwen3MoeTopKRouter": softmax_all,
    "Qwen2MoeTopKRouter": softmax_all,
    "OlmoeTopKRouter": softmax_all,
    "MixtralTopKRouter": softmax_chosen,
    "GptOssTopKRouter": softmax_chosen,
    "DeepseekV3TopkRouter": sigmoid_scaled,
    "Glm4MoeTopkRouter": sigmoid_scaled,
    "GlmMoeDsaTopkRouter": sigmoid_scaled,
}


def gate_weights_for(router: nn.Module) -> GateWeights:
    """The replay formula of `router`'s class; a class not in the table is refused."""
    name = type(router).__name__
    if name not in FORMULAS:
        raise ValueError(
            f"router class {name} has no replay formula in engines/trainer/routers.py (known: "
            f"{', '.join(sorted(FORMULAS))}): add its weighting formula there, or set trainer.router_replay='off'"
        )
    return FORMULAS[name]
