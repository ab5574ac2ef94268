"""The tiny MoE's shape, apart from the model code: a run's configuration reads it in
processes that never build the model, without importing torch and transformers (about
5 CPU-seconds at each process start)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
