"""Ranks that read only their shard (engines/trainer/sharded_load.py): every MoE family
(engines/model/families.py) and the run's tiny model (embeddings tied to the head), built
on the meta device and loaded by two gloo ranks under
fsdp2 and fsdp2_ep, computes the logits of the whole model loaded by transformers, and
each rank holds about half of the parameters (the whole model never in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engines.model.families import FAMILIES, build_tiny
from engines.model.load import load_moe_causal_lm
from engines.model.tokenizer import train_tokenizer
from engines.trainer.export import export_weights
from engines.trainer.sharded_load import CheckpointReader
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


@pytest.mark.slow
def test_each_family_loaded_by_shards_computes_the_whole_models_logits(family_dirs, tmp_path) -> None:
    out = tmp_path / "out.pt"
    run_two_ranks("sharded_load_worker.py", str(out), *map(str, family_dirs.values()), timeout_s=600)
    results = torch.load(out, weights_only=False)
    for family, model_dir in family_dirs.items():
        whole = load_moe_causal_lm(model_dir).eval()
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
