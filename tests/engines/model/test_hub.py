"""A Hugging Face model id as model.path, resolved offline through a Hub cache that
the test fills itself (the layout huggingface_hub writes: refs/main -> snapshots/<commit>)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engines.model.hub import is_hub_id
from flows.config import RunConfig
from flows.config_loader import ConfigError, load_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fill_cache(cache: Path, repo_id: str, model_dir: Path) -> Path:
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def resolve_offline(repo_id: str, cache: Path) -> subprocess.CompletedProcess:
    # A fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE and the cache path at import.
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    code = f"from engines.model.hub import resolve_model; print(resolve_model({repo_id!r}))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_hub_id_resolves_to_the_cached_snapshot_offline(tmp_path: Path, tiny_model_dir: Path) -> None:
    snapshot = fill_cache(tmp_path / "hub", "tandem-test/tiny-moe", tiny_model_dir)
    done = resolve_offline("tandem-test/tiny-moe", tmp_path / "hub")
    assert done.returncode == 0, done.stderr
    resolved = Path(done.stdout.strip())
    assert resolved == snapshot
    from transformers import AutoConfig

    assert (
        AutoConfig.from_pretrained(resolved).model_type
        == json.loads((tiny_model_dir / "config.json").read_text())["model_type"]
    )


def test_uncached_id_offline_is_an_error_naming_it(tmp_path: Path) -> None:
    done = resolve_offline("tandem-test/not-cached", tmp_path / "hub")
    assert done.returncode != 0
    assert "model.path 'tandem-test/not-cached': not in the Hugging Face cache" in done.stderr


def test_run_config_accepts_ids_and_still_refuses_missing_paths(tmp_path: Path) -> None:
    assert load_config(RunConfig, None, ["--model.path", "Qwen/Qwen3-30B-A3B"]).model.path == "Qwen/Qwen3-30B-A3B"
    assert is_hub_id("Qwen/Qwen3-30B-A3B") and not is_hub_id(str(tmp_path)) and not is_hub_id("s3://b/m")
    with pytest.raises(ConfigError, match=r"model\.path"):
        load_config(RunConfig, None, ["--model.path", "/nonexistent/model"])
    with pytest.raises(ConfigError, match=r"model\.path"):
        load_config(RunConfig, None, ["--model.path", "not an id/with spaces"])
