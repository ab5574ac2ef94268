"""Ranks that read only their shard (engines/trainer/sharded_load.py): every MoE family
(engines/model/families.py) and the run's tiny model (embeddings tied to the head), built
on the meta device and loaded by two gloo ranks under
fsdp2 and fsdp2_ep, computes the logits of the whole model loaded by transformers, and
each rank holds about half of the parameters (the whole model never in memory). A
block-FP8 checkpoint is de-quantised row by row with its blocks' scales."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engines.model.families import FAMILIES, build_tiny
from engines.model.load import load_moe_causal_lm
from engines.model.tokenizer import train_tokenizer
from engines.trainer.config import TrainerConfig
from engines.trainer.distributed import load_model
from engines.trainer.export import dequantize_fp8_blockwise, export_weights, quantize_fp8_blockwise
from engines.trainer.sharded_load import CheckpointReader, fp8_block
from tests.engines.trainer.sharded_load_worker import PROBE
from tests.engines.trainer.two_ranks import run_two_ranks


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    """Each family's tiny model, and the run's own (its embeddings tied to its head)."""
    tok = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 40, 300)
    out = tmp_path_factory.mktemp("families")
    return {"tied": tiny_model_dir} | {
        f: Path(export_weights(build_tiny(f, vocab_size=len(tok), seed=3), tok, str(out / f), "fp32")) for f in FAMILIES
    }


@pytest.fixture(scope="module")
def fp8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DeepSeek-V3 (GLM-5's layout of experts) exported as block FP8, as GLM-5 ships."""
    tok = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 40, 300)
    model = build_tiny("deepseek_v3", vocab_size=len(tok), seed=3)
    return Path(export_weights(model, tok, str(tmp_path_factory.mktemp("fp8") / "m"), "fp8"))


def _whole(model_dir: Path) -> torch.nn.Module:
    """The model every rank would hold without sharding: transformers' load, or, for a
    block-FP8 checkpoint, the lane's de-quantised load under ddp."""
    if fp8_block(model_dir) is None:
        return load_moe_causal_lm(model_dir)
    return load_model(model_dir, TrainerConfig())


@pytest.mark.slow
def test_each_family_loaded_by_shards_computes_the_whole_models_logits(family_dirs, fp8_dir, tmp_path) -> None:
    out = tmp_path / "out.pt"
    dirs = family_dirs | {"fp8": fp8_dir}
    run_two_ranks("sharded_load_worker.py", str(out), *map(str, dirs.values()), timeout_s=600)
    results = torch.load(out, weights_only=False)
    for family, model_dir in dirs.items():
        whole = _whole(model_dir).eval()
        with torch.no_grad():
            expected = whole(input_ids=PROBE, use_cache=False).logits
        total = sum(p.numel() for p in whole.parameters())
        for parallelism in ("fsdp2", "fsdp2_ep"):
            got = results[(str(model_dir), parallelism)]
            assert torch.allclose(got["logits"], expected, atol=1e-5), (family, parallelism)
            assert sum(got["held"]) == total and max(got["held"]) <= 0.6 * total, (family, parallelism, got["held"])


def test_a_checkpoint_reads_rows_of_one_tensor_without_the_rest(family_dirs) -> None:
    reader = CheckpointReader(family_dirs["qwen3_moe"])
    key = "model.embed_tokens.weight"
    whole = load_moe_causal_lm(family_dirs["qwen3_moe"]).model.embed_tokens.weight
    assert torch.equal(reader.rows(key, 3, 7), whole[3:7].detach())
    with pytest.raises(FileNotFoundError, match="holds no safetensors weights"):
        CheckpointReader(family_dirs["qwen3_moe"].parent)


def test_block_fp8_rows_are_dequantised_with_their_blocks_scales(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    w = torch.randn(300, 200)
    q, scale = quantize_fp8_blockwise(w)  # blocks of 128: rows 100-290 span three
    save_file({"w.weight": q, "w.weight_scale_inv": scale}, str(tmp_path / "model.safetensors"))
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": quant}))
    reader = CheckpointReader(tmp_path)
    assert torch.equal(reader.rows("w.weight", 100, 290), dequantize_fp8_blockwise(q, scale)[100:290])
    quant["quant_method"] = "awq"
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": quant}))
    with pytest.raises(ValueError, match="quantization 'awq' .* cannot be read for training"):
        CheckpointReader(tmp_path)


def test_a_block_fp8_checkpoint_trains_in_full_precision_close_to_its_source(fp8_dir: Path) -> None:
    tok = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 40, 300)
    source = build_tiny("deepseek_v3", vocab_size=len(tok), seed=3).eval()  # what fp8_dir was exported from
    model = load_model(fp8_dir, TrainerConfig()).eval()
    assert all(p.dtype == torch.float32 and not p.is_meta for p in model.parameters())
    with torch.no_grad():
        got, want = (m(input_ids=PROBE, use_cache=False).logits for m in (model, source))
    assert not torch.equal(got, want) and torch.allclose(got, want, atol=0.05), (got - want).abs().max()
