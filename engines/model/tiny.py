"""The tiny Qwen3-MoE that runs the whole loop on a 2-core CPU.

Sizes follow the calibration in shared/REFERENCE.md: hidden 128, 4 layers, 4 heads
(2 KV), 8 experts top-2 of width 128, tied embeddings: about 1.9M parameters, 0.7M
active per token. It learns the micro bug-fix protocol in minutes of SFT, which a
10M model does not (3.7x slower per step).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from engines.model.tokenizer import train_tokenizer


class TinyModelConfig(BaseModel):
    """Shape of the tiny MoE created when no checkpoint exists."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(1024, ge=64, description="BPE vocabulary size, special tokens included.")
    hidden_size: int = Field(128, ge=16, description="Residual width.")
    num_layers: int = Field(4, ge=1, description="Decoder layers, each with an MoE block.")
    num_heads: int = Field(4, ge=1, description="Attention heads.")
    num_kv_heads: int = Field(2, ge=1, description="Key/value heads (grouped-query attention).")
    num_experts: int = Field(8, ge=2, description="Routed experts per layer.")
    top_k: int = Field(2, ge=1, description="Experts per token.")
    expert_width: int = Field(128, ge=8, description="Hidden width of each expert's MLP.")
    max_position_embeddings: int = Field(1024, ge=64, description="Longest sequence in tokens.")
    seed: int = Field(0, description="Seed for the random initial weights.")
    tokenizer_text: Literal["demonstrations", "installed_code"] = Field(
        "demonstrations",
        description="What the BPE tokenizer learns from. 'demonstrations': the warm start's demonstrations and, in a "
        "corpus run, the training projects' code, whose names become whole tokens. 'installed_code': the Python code "
        "installed beside the trainer and the drills' text, no project's own, so a held-out project's names split into "
        "the same pieces as a training project's. Refused for micro runs.",
    )


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
