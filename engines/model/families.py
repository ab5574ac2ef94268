"""Tiny random configs of each major MoE family transformers ships, built locally.

Test models for router replay, parallelism and export across architectures: each is
a few hundred thousand parameters (hidden 64, 2 heads of 32, 2 decoder layers,
8 routed experts, top-2), small enough to train on CPU in a test. Nothing is
downloaded; weights are random (`build_tiny(family, vocab_size, seed)`).

Family details kept on purpose, because they change the router or the expert layout:
- deepseek_v3 / glm4_moe: sigmoid router with correction bias, 2 groups of 4 experts
  (top-1 group), routed scaling 2.5, one shared expert; every layer is MoE.
- gpt_oss: router with a bias and softmax over the chosen logits; experts with biases,
  transposed weight layout and a clamped SwiGLU; sliding and full attention layers.
- mixtral: softmax top-2 renormalised.
- qwen3_moe: softmax over all experts, renormalised top-k.
"""

from __future__ import annotations

import torch
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    Glm4MoeConfig,
    GptOssConfig,
    MixtralConfig,
    PretrainedConfig,
    PreTrainedModel,
    Qwen3MoeConfig,
)

FAMILIES = ("qwen3_moe", "mixtral", "deepseek_v3", "glm4_moe", "gpt_oss")

# head_dim 32: vLLM's CPU attention kernels refuse 16 ("Unsupported CPU attention configuration").
_COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    output_router_logits=False,
)


# Every family's experts: 8 routed experts of width 32, top-2 (dense MLPs: width 128).
_EXPERTS, _TOP_K, _EXPERT_WIDTH, _DENSE_WIDTH = 8, 2, 32, 128


def _experts(count_key: str, width_key: str) -> dict[str, int]:
    """The shared expert layout under a family's own key names."""
    return {count_key: _EXPERTS, "num_experts_per_tok": _TOP_K, width_key: _EXPERT_WIDTH}


def tiny_config(family: str, vocab_size: int = 256) -> PretrainedConfig:
    """A tiny config of `family` (one of FAMILIES)."""
    c = dict(_COMMON, vocab_size=vocab_size)
    if family == "qwen3_moe":
        return Qwen3MoeConfig(
            **c,
            **_experts("num_experts", "moe_intermediate_size"),
            intermediate_size=_DENSE_WIDTH,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    if family == "mixtral":
        return MixtralConfig(**c, **_experts("num_local_experts", "intermediate_size"))
    if family in ("deepseek_v3", "glm4_moe"):
        routed = dict(
            **_experts("n_routed_experts", "moe_intermediate_size"),
            intermediate_size=_DENSE_WIDTH,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            n_shared_experts=1,
            first_k_dense_replace=0,
        )
        if family == "glm4_moe":
            return Glm4MoeConfig(**c, **routed, partial_rotary_factor=0.5)
        c.pop("head_dim")
        # MLA has no grouped KV heads; DeepSeek-V3's config states as many as query heads.
        c["num_key_value_heads"] = c["num_attention_heads"]
        # topk_method as DeepSeek-V3's own config.json states it: vLLM creates the
        # router's correction bias only for "noaux_tc". MLA's latent width as DeepSeek-V3's
        # (kv_lora_rank 512 + rope 64 = 576): the only one vLLM's CPU MLA kernel compiles.
        # qk_nope_head_dim 32: vLLM's AMX MLA backend packs W_UK in 32-wide tiles.
        return DeepseekV3Config(
            **c,
            **routed,
            topk_method="noaux_tc",
            q_lora_rank=32,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=32,
            v_head_dim=32,
        )
    if family == "gpt_oss":
        return GptOssConfig(
            **c,
            **_experts("num_local_experts", "intermediate_size"),
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
            # YaRN as GPT-OSS ships it (vLLM's GPT-OSS reads these keys), at a tiny scale.
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 2.0,
                "original_max_position_embeddings": 256,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
            },
        )
    raise ValueError(f"unknown MoE family {family!r}: use one of {', '.join(FAMILIES)}")


def build_tiny(family: str, vocab_size: int = 256, seed: int = 0) -> PreTrainedModel:
    """A randomly initialised fp32 model of `family`, with non-trivial router state:
    the sigmoid routers' correction bias is random, so choice and weight differ."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, vocab_size), dtype=torch.float32)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "e_score_correction_bias"):
                m.e_score_correction_bias.normal_(0, 0.1)
            if type(m).__name__.endswith("Router") and getattr(m, "weight", None) is not None:
                m.weight.normal_(0, 0.2)  # some routers start at zero: every expert tied
            if type(m).__name__ == "GptOssTopKRouter":
                m.bias.normal_(0, 0.1)
    return model
