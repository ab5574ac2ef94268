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
    # An explicit tool_format: 'auto' would read the id's chat template (below).
    given = ["--model.path", "Qwen/Qwen3-30B-A3B", "--inference.tool_format", "text"]
    assert load_config(RunConfig, None, given).model.path == "Qwen/Qwen3-30B-A3B"
    assert is_hub_id("Qwen/Qwen3-30B-A3B") and not is_hub_id(str(tmp_path)) and not is_hub_id("s3://b/m")
    with pytest.raises(ConfigError, match=r"model\.path"):
        load_config(RunConfig, None, ["--model.path", "/nonexistent/model"])
    with pytest.raises(ConfigError, match=r"model\.path"):
        load_config(RunConfig, None, ["--model.path", "not an id/with spaces"])


def test_auto_tool_format_reads_a_cached_ids_template_and_names_the_field_when_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants as hub_constants

    from tests.chat_models import chat_tokenizer_dir

    # hf_hub_download reads both at each call: offline, from this cache.
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = fill_cache(tmp_path / "hub", "tandem-test/qwen3", chat_tokenizer_dir("qwen3", tmp_path / "qwen3"))
    (snapshot / "chat_template.jinja").unlink(missing_ok=True)  # the template in tokenizer_config.json only
    config = json.loads((snapshot / "tokenizer_config.json").read_text())
    if "chat_template" not in config:
        from tests.chat_models import QWEN3_TEMPLATE

        (snapshot / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": QWEN3_TEMPLATE}))
    given = ["--model.path", "tandem-test/qwen3"]
    # Qwen3's template writes <tool_call>{...}</tool_call>: hermes, decided, not given.
    settled = load_config(RunConfig, None, given).inference
    assert settled.tool_format == "hermes" and "tool_format" not in settled.model_fields_set
    assert load_config(RunConfig, None, [*given, "--inference.tool_format", "text"]).inference.tool_format == "text"
    with pytest.raises(ConfigError, match=r"set inference\.tool_format"):
        load_config(RunConfig, None, ["--model.path", "tandem-test/not-cached"])
