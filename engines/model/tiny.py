"""The tiny Qwen3-MoE that runs the whole loop on a 2-core CPU.

Sizes follow the calibration in shared/REFERENCE.md: hidden 128, 4 layers, 4 heads
(2 KV), 8 experts top-2 of width 128, tied embeddings: about 1.9M parameters, 0.7M
active per token. It learns the micro bug-fix protocol in minutes of SFT, which a
10M model does not (3.7x slower per step).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from engines.model.tiny_config import TinyModelConfig
from engines.model.tokenizer import train_tokenizer


def tiny_qwen3_moe_config(cfg: TinyModelConfig, vocab_size: int) -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=2 * cfg.hidden_size,
        moe_intermediate_size=cfg.expert_width,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.top_k,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        output_router_logits=False,
        torch_dtype="float32",
    )


def create_tiny_model(out_dir: str | Path, texts: Iterable[str], cfg: TinyModelConfig | None = None) -> Path:
    """Train a tokenizer on `texts`, build a randomly initialised tiny MoE, save both
    (safetensors, HF layout that transformers and vLLM load). Returns `out_dir`."""
    cfg = cfg or TinyModelConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    torch.manual_seed(cfg.seed)
    model = Qwen3MoeForCausalLM(tiny_qwen3_moe_config(cfg, len(tokenizer)))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
