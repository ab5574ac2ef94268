"""The warm-start cache: its key changes with every input and with nothing else, a
cached warm start is built once and then reused, a failed build caches nothing, and
the trainer settings in the key are every one SFT reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engines.trainer.config import TrainerConfig
from engines.trainer.warm_start_cache import (
    CODE_MODULES,
    CORPUS_MODULES,
    INPUTS_FILE,
    SFT_PLACEMENT_FIELDS,
    SFT_TRAINER_FIELDS,
    cached,
    code_digest,
    copy_to_store,
    warm_start_inputs,
    warm_start_key,
)
from storage.fs import open_store

REPO = Path(__file__).resolve().parents[3]

BASE = dict(
    tasks="sha256:abc",
    demonstrations={"kind": "feedback", "edit_attempts": 3, "failed_attempt_share": 0.5, "edit_tool": "edit"},
    sft={"lr": 0.002, "max_steps": 800, "schedule": "cosine"},
    trainer={"seed": 0, "seq_len": 512},
    model={"hidden_size": 64, "num_experts": 8},
    code="c0",
)

CHANGES = [
    ("tasks", "sha256:abd"),
    ("demonstrations", {**BASE["demonstrations"], "edit_attempts": 0}),
    ("demonstrations", {**BASE["demonstrations"], "failed_attempt_share": 0.25}),
    ("demonstrations", {**BASE["demonstrations"], "edit_tool": "replace"}),
    ("demonstrations", {**BASE["demonstrations"], "edit_tool": "function_change"}),
    ("demonstrations", {**BASE["demonstrations"], "demonstrator": "candidates"}),
    ("sft", {**BASE["sft"], "max_steps": 400}),
    ("sft", {**BASE["sft"], "lr": 0.001}),
    ("trainer", {**BASE["trainer"], "seed": 1}),
    ("model", {**BASE["model"], "num_experts": 4}),
    ("code", "c1"),
]


def test_the_key_is_the_same_for_the_same_inputs_in_any_order() -> None:
    key = warm_start_key(warm_start_inputs(**BASE))
    reordered = {name: BASE[name] for name in reversed(list(BASE))}
    assert warm_start_key(warm_start_inputs(**reordered)) == key
    assert warm_start_key(warm_start_inputs(**{**BASE, "sft": dict(reversed(BASE["sft"].items()))})) == key
    assert len(key) == 16


@pytest.mark.parametrize(("name", "value"), CHANGES)
def test_the_key_changes_when_any_input_changes(name: str, value: object) -> None:
    assert warm_start_key(warm_start_inputs(**{**BASE, name: value})) != warm_start_key(warm_start_inputs(**BASE))


def test_the_code_digest_follows_every_module(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    before = code_digest(("a.py", "b.py"), tmp_path)
    assert code_digest(("a.py", "b.py"), tmp_path) == before
    (tmp_path / "b.py").write_text("# b.py, changed\n")
    assert code_digest(("a.py", "b.py"), tmp_path) != before


def test_the_project_code_digest_reads_every_listed_module() -> None:
    assert len(code_digest()) == 64  # every module of CODE_MODULES exists
    assert len(code_digest(CODE_MODULES + CORPUS_MODULES)) == 64
    assert not set(CODE_MODULES) & set(CORPUS_MODULES)


def test_a_cached_warm_start_is_built_once_then_reused(tmp_path: Path) -> None:
    builds: list[Path] = []
    lines: list[str] = []

    def build(out: Path) -> None:
        builds.append(out)
        (out / "config.json").write_text("{}")

    inputs = warm_start_inputs(**BASE)
    key = warm_start_key(inputs)
    first = cached(key, build, root=tmp_path, inputs=inputs, log=lines.append)
    second = cached(key, build, root=tmp_path, inputs=inputs, log=lines.append)
    assert first == second == tmp_path / key
    assert len(builds) == 1
    assert (first / "config.json").read_text() == "{}" and (first / INPUTS_FILE).is_file()
    assert lines[0].startswith(f"[sft] building the warm start (key {key}")
    assert lines[1] == f"[sft] warm start from the cache: key {key} ({first})"


def test_a_failed_build_caches_nothing(tmp_path: Path) -> None:
    def fails(out: Path) -> None:
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError):
        cached("k", fails, root=tmp_path, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []
    built = cached("k", lambda out: (out / "config.json").write_text("{}"), root=tmp_path, log=lambda _: None)
    assert sorted(p.name for p in built.iterdir()) == ["config.json"]


def test_a_cached_warm_start_is_copied_into_the_lake(tmp_path: Path) -> None:
    src = tmp_path / "cached"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"weights")
    store = open_store(str(tmp_path / "lake"))
    uri = store.url("run/weights/v0")
    assert copy_to_store(src, store, uri) == uri
    assert (Path(uri) / "model.safetensors").read_bytes() == b"weights"
    (src / "model.safetensors").write_bytes(b"other")
    copy_to_store(src, store, uri)  # a second copy replaces the first
    assert (Path(uri) / "model.safetensors").read_bytes() == b"other"


def test_the_key_holds_every_trainer_setting_sft_reads() -> None:
    """`cfg.<field>` reads in engines/trainer/sft.py, besides cfg.sft, are in SFT_TRAINER_FIELDS
    or place its ranks only (SFT_PLACEMENT_FIELDS)."""
    tree = ast.parse((REPO / "engines/trainer/sft.py").read_text())
    read = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cfg"
    }
    fields = read & set(TrainerConfig.model_fields)  # not its methods (model_copy, sft_unsupported)
    assert fields - {"sft"} <= {*SFT_TRAINER_FIELDS, *SFT_PLACEMENT_FIELDS}
    assert {*SFT_TRAINER_FIELDS, *SFT_PLACEMENT_FIELDS} <= set(TrainerConfig.model_fields)
