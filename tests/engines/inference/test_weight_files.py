"""The directories servers load published weights from (no server needed)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from engines.inference.weight_files import LM_HEAD, reload_dir, serving_dir


def test_serving_dir_takes_config_from_the_model_and_weights_from_the_publisher(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    published = tmp_path / "v3"
    published.mkdir()
    (published / "model.safetensors").write_bytes((tiny_model_dir / "model.safetensors").read_bytes())
    out = serving_dir(published, tiny_model_dir, tmp_path / "staging", version=3)
    assert (out / "model.safetensors").resolve() == (published / "model.safetensors").resolve()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).resolve() == (tiny_model_dir / name).resolve()
    assert out == serving_dir(published, tiny_model_dir, tmp_path / "staging", version=3)  # rebuilt, not stacked


def test_reload_dir_adds_the_tied_lm_head(tiny_model_dir: Path, tmp_path: Path) -> None:
    staged = reload_dir(tiny_model_dir, tiny_model_dir, tmp_path)
    assert staged != tiny_model_dir and staged.parent == tmp_path
    with safe_open(str(staged / "tied-lm-head.safetensors"), framework="pt") as f:
        head = f.get_tensor(LM_HEAD)
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as f:
        assert torch.equal(head, f.get_tensor("model.embed_tokens.weight"))
    assert not (tiny_model_dir / "tied-lm-head.safetensors").exists()  # the published dir is untouched
