"""Load any Hugging Face MoE causal LM (and its tokenizer) from a directory or S3.

An `s3://` source is copied to a local cache directory first (transformers reads
local files), which appears whole (storage.atomic_dir). A directory that holds no causal LM, or a dense one, is refused with a
message naming the directory and what was found.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel

# Config attributes that name the routed-expert count across transformers MoE families
# (Qwen3-MoE/OLMoE: num_experts, Mixtral: num_local_experts, DeepSeek/GLM: n_routed_experts).
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def local_model_dir(source: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A local directory holding the model of `source` (copied once from s3://)."""
    src = str(source)
    if not src.startswith("s3://"):
        path = Path(src)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model directory {path} has no config.json: give a saved Hugging Face model dir")
        return path
    from storage.atomic_dir import atomic_dir
    from storage.fs import open_store

    store = open_store(src)
    cache = Path(cache_dir or os.path.join(tempfile.gettempdir(), "tandem-models"))
    dest = cache / hashlib.sha256(src.encode()).hexdigest()[:16]
    if not (dest / "config.json").is_file():
        # replace=False: a process that finished the same download first keeps its copy
        with atomic_dir(dest, replace=False) as tmp:
            store.call(f"download {src}", lambda: store.fs.get(store.root + "/", str(tmp), recursive=True))
            if not (tmp / "config.json").is_file():
                raise FileNotFoundError(f"{src} has no config.json: give the URL of a saved Hugging Face model dir")
    return dest


def num_routed_experts(config: PretrainedConfig) -> int:
    cfg = getattr(config, "text_config", None) or config
    return max((int(getattr(cfg, k, 0) or 0) for k in _EXPERT_KEYS), default=0)


def check_moe_causal_lm(config: PretrainedConfig, where: str) -> None:
    archs = list(getattr(config, "architectures", None) or [])
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise ValueError(f"{where} holds {archs}, not a causal LM: give a *ForCausalLM checkpoint")
    if num_routed_experts(config) < 2:
        raise ValueError(
            f"{where} holds a dense model ({config.model_type}, no routed experts in {list(_EXPERT_KEYS)}): "
            "the trainer needs a Mixture-of-Experts causal LM"
        )


def load_moe_causal_lm(source: str | Path, **kwargs) -> PreTrainedModel:
    """The MoE causal LM of `source` (local dir or s3://), fp32 unless `dtype` is given.

    Extra kwargs go to `from_pretrained` (e.g. `distributed_config`, `experts_implementation`).
    """
    path = local_model_dir(source)
    config = AutoConfig.from_pretrained(path)
    check_moe_causal_lm(config, str(source))
    kwargs.setdefault("dtype", "float32")
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def empty_moe_causal_lm(source: str | Path) -> PreTrainedModel:
    """The MoE causal LM of `source` with its parameters on the meta device (no weights
    read or allocated) and its buffers (rotary tables) computed: for ranks that each
    read only their shard of the weights (engines/trainer/sharded_load.py)."""
    from accelerate import init_empty_weights

    path = local_model_dir(source)
    config = AutoConfig.from_pretrained(path)
    check_moe_causal_lm(config, str(source))
    if hasattr(config, "quantization_config"):  # trained in full precision: its weights are read de-quantised
        del config.quantization_config
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype="float32")
    model.tie_weights()  # from_pretrained ties (tie_word_embeddings); from_config leaves them apart
    return model


def load_tokenizer(source: str | Path):
    return AutoTokenizer.from_pretrained(local_model_dir(source))
