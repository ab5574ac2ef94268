"""Weights out of the trainer, in the layout transformers and vLLM load.

`export_weights` writes a Hugging Face directory (config, safetensors, tokenizer,
generation config) through the model's own `save_pretrained`, which for transformers
5 MoE models converts the fused 3-D expert tensors into vLLM's per-expert layout
(`mlp.experts.<e>.{gate,up,down}_proj.weight`), plus `tensor-digests.json`: the
digest of every tensor as written, which a weight update checks the servers against
(engines/inference/weight_files.py). The directory appears whole: it is staged and
committed by `storage.atomic_dir` (local, fsynced) or uploaded before the caller
publishes the registry record (storage.checkpoints), which is the commit marker.

FP8 (`fmt="fp8"`): every linear projection weight of attention and experts becomes
float8 e4m3 with one float32 scale per 128x128 block (`<name>.weight_scale_inv`,
dequantised weight = fp8 * scale), and config.json gains the `quantization_config`
vLLM's `Fp8Config` reads (`quant_method: fp8`, `weight_block_size: [128, 128]`,
dynamic activation scales). Router gates, embeddings, norms and lm_head stay bf16, listed
by full module name in `modules_to_not_convert` (vLLM matches the names exactly). vLLM
needs every fused projection but the last (q and k of qkv, gate of gate_up) to be a
multiple of 128 rows; `scripts/gpu_check.py --checks fp8_export` serves such a model.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from engines.inference.vllm_extension.tensor_digest import write_digests
from storage.atomic_dir import atomic_dir

BLOCK = 128
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
_FP8_TARGETS = (
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "o_proj.weight",
    "gate_proj.weight",
    "up_proj.weight",
    "down_proj.weight",
)
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.bfloat16}


def quantize_fp8_blockwise(w: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (fp8 [out, in], scale_inv float32 [ceil(out/block), ceil(in/block)])
    with w ~= fp8 * scale_inv broadcast over each block."""
    out_f, in_f = w.shape
    nb_o, nb_i = -(-out_f // block), -(-in_f // block)
    padded = torch.zeros(nb_o * block, nb_i * block, dtype=torch.float32)
    padded[:out_f, :in_f] = w.float()
    blocks = padded.view(nb_o, block, nb_i, block)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # [nb_o, nb_i]
    scale = amax / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q.view(nb_o * block, nb_i * block)[:out_f, :in_f].contiguous(), scale


def dequantize_fp8_blockwise(q: torch.Tensor, scale: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    s = scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[: q.shape[0], : q.shape[1]]
    return q.float() * s


def export_weights(
    model: nn.Module,
    tokenizer,
    dest: str,
    fmt: str = "fp32",
    store=None,
    state_dict: dict[str, torch.Tensor] | None = None,
    architecture: str | None = None,
) -> str:
    """Write `model` (unwrapped) and `tokenizer` as an HF directory at `dest` (local path,
    or a path inside `store` for s3). Returns `dest`. Replaces an existing export.

    A sharded model passes its gathered `state_dict` (full_state.py) and the class name
    it had before sharding (`architecture`: FSDP2 renames the class, and
    `save_pretrained` would record the renamed one)."""
    if fmt not in _DTYPES:
        raise ValueError(f"export format {fmt!r}: use one of {sorted(_DTYPES)}")
    if store is not None and store.protocol != "file":
        with tempfile.TemporaryDirectory(prefix="tandem-export-") as tmp:
            _write_export(Path(tmp), model, tokenizer, fmt, state_dict, architecture)
            _upload(store, Path(tmp), dest.removeprefix(f"{store.protocol}://"))
    else:
        with atomic_dir(dest) as stage:
            _write_export(stage, model, tokenizer, fmt, state_dict, architecture)
    return dest


def _write_export(
    out: Path, model: nn.Module, tokenizer, fmt: str, state_dict: dict | None, architecture: str | None
) -> None:
    _save_hf(model, tokenizer, out, _DTYPES[fmt], state_dict, architecture)
    if fmt == "fp8":
        quantize_dir_fp8(out)
    write_digests(out)  # last: over the tensors exactly as written


def _save_hf(
    model: nn.Module,
    tokenizer,
    out: Path,
    dtype: torch.dtype,
    source: dict | None = None,
    architecture: str | None = None,
) -> None:
    state, seen = {}, set()
    for k, v in (model.state_dict() if source is None else source).items():
        if v.data_ptr() in seen:  # a tied weight (lm_head = embeddings): saved once, as save_pretrained does
            continue
        seen.add(v.data_ptr())
        state[k] = v.detach().to(dtype) if v.is_floating_point() else v.detach()
    model.save_pretrained(out, state_dict=state, safe_serialization=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dtype"] = str(dtype).removeprefix("torch.")  # loaders default to the exported dtype
    if architecture is not None:
        cfg["architectures"] = [architecture]
    cfg_path.write_text(json.dumps(cfg, indent=2))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def quantize_dir_fp8(out: Path) -> None:
    """Rewrite the safetensors of an exported dir as block-FP8 and record it in config.json."""
    kept: set[str] = {"lm_head"}  # modules whose 2-D weights stay bf16 (router gates, embeddings)
    for f in sorted(out.glob("*.safetensors")):
        tensors = load_file(f)
        quantized: dict[str, torch.Tensor] = {}
        for name, t in tensors.items():
            if t.dim() == 2 and name.endswith(_FP8_TARGETS):
                q, s = quantize_fp8_blockwise(t)
                quantized[name], quantized[name + "_scale_inv"] = q, s
            else:
                quantized[name] = t
                if t.dim() == 2 and name.endswith(".weight"):
                    kept.add(name.removesuffix(".weight"))
        save_file(quantized, f, metadata={"format": "pt"})
    index = out / "model.safetensors.index.json"
    if index.exists():  # sharded checkpoints: scales live beside their weights
        data = json.loads(index.read_text())
        wm = data["weight_map"]
        for name, file in list(wm.items()):
            if name.endswith(_FP8_TARGETS):
                wm[name + "_scale_inv"] = file
        index.write_text(json.dumps(data, indent=2))
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK],
        # Full module names: vLLM's Fp8Config matches them exactly against its layer prefixes.
        "modules_to_not_convert": sorted(kept),
    }
    cfg_path.write_text(json.dumps(cfg, indent=2))


def _upload(store, stage: Path, path: str) -> None:
    """Each object's PUT is atomic; the registry record published afterwards commits the whole."""
    if store.call("check export", lambda: store.fs.exists(path)):
        store.call("replace export", lambda: store.fs.rm(path, recursive=True))
    for f in sorted(stage.iterdir()):
        store.call(f"upload {f.name}", lambda f=f: store.fs.put_file(str(f), f"{path}/{f.name}"))
