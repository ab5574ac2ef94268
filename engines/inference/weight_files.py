"""The published weights as servers load them: the folders they load from, and the
check that a server loaded exactly those tensors.

`serving_dir`: a model directory for a fresh server start with new weights: the
config and tokenizer of the original model directory plus the published safetensors
(links, nothing copied). Used by the restart update (`weight_update='restart'`).

`reload_dir`: what to pass to the in-place reload. vLLM 0.32 reloads
weights layer by layer. A model with tied word embeddings (the tiny MoE, many small
models) saves no `lm_head.weight`; on reload the embedding gets the new weights,
the LM head gets none, and vLLM puts the old tensor back into it
("ParallelLMHead: Failed to load weights" in the server log): the server then
samples from new hidden states through the old output layer. Measured here: served
logprobs off by up to 20 nats after a reload.

The fix uses only vLLM's public loading: when the checkpoint is tied and lacks
`lm_head.weight`, reload from a staging directory holding links to the published
safetensors files plus one small file with `lm_head.weight` = the new embedding.
The published directory itself is never modified.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from pathlib import Path

import httpx
from safetensors import safe_open
from safetensors.torch import save_file

from engines.inference import client
from engines.inference.vllm_extension.tensor_digest import file_digests, read_digests

EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
log = logging.getLogger(__name__)


def is_tied(config_dir: Path) -> bool:
    config = json.loads((config_dir / "config.json").read_text())
    text = config.get("text_config") or {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def tensor_names(weights_dir: Path) -> dict[str, Path]:
    """Every tensor name in the directory's safetensors files -> its file."""
    names: dict[str, Path] = {}
    for file in sorted(weights_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            names.update({k: file for k in f.keys()})  # noqa: SIM118 - safe_open is not a mapping
    return names


def serving_dir(weights_dir: Path, model_dir: Path, root: Path, version: int) -> Path:
    """A model directory (under `root`) holding `weights_dir`'s weights and the rest of
    `model_dir` (config, tokenizer, generation config) for a server to start from."""
    out = root / f"serving-v{version}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    weight_files = {
        p.name for p in weights_dir.iterdir() if p.name.endswith((".safetensors", ".safetensors.index.json"))
    }
    for src in model_dir.iterdir():
        if src.is_file() and not src.name.endswith((".safetensors", ".safetensors.index.json")):
            os.symlink(src.resolve(), out / src.name)
    for name in weight_files:
        os.symlink((weights_dir / name).resolve(), out / name)
    return out


def reload_dir(weights_dir: Path, config_dir: Path, staging_root: Path | None = None) -> Path:
    """The directory to pass to vLLM's reload for `weights_dir`: itself, or a staging
    directory (under `staging_root`, else beside `weights_dir`; the servers must see
    it) with an explicit LM head when the model ties it to the embedding."""
    if not is_tied(config_dir):
        return weights_dir
    names = tensor_names(weights_dir)
    if LM_HEAD in names or EMBEDDING not in names:
        return weights_dir
    staged = (staging_root or weights_dir.parent) / f".{weights_dir.name}.vllm-reload"
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir()
    for file in sorted(set(names.values())):
        os.symlink(file.resolve(), staged / file.name)
    with safe_open(str(names[EMBEDDING]), framework="pt") as f:
        embedding = f.get_tensor(EMBEDDING)
    save_file({LM_HEAD: embedding.contiguous()}, str(staged / "tied-lm-head.safetensors"))
    return staged


# ---- servers checked against the files ----------------------------------------
# Checks that servers hold the weights the trainer exported, with one server or many.
#
# Against the export: every tensor a server's workers loaded must have the digest the
# exporter wrote beside the weights (`tensor-digests.json`, computed by
# vllm_extension/tensor_digest.py, the same function the workers run). A directory
# published without digests (a plain Hugging Face directory) is digested here, once
# per update, so the check still proves the servers loaded those files. Needs the
# worker extension (`inference.worker_extension`).
#
# Across servers (two or more): vLLM's per-parameter checksums of the loaded model
# must be identical, which also covers what the servers did after reading the files.


class WeightUpdateError(RuntimeError):
    """A weight update failed or could not be verified on some server."""


def expected_digests(weights_dir: Path) -> dict[str, str]:
    """The digests a server that loaded `weights_dir` must report: the exporter's, else the files'."""
    digests = read_digests(weights_dir)
    if digests is None:
        log.info("%s has no tensor digests (not written by the exporter): digesting its files", weights_dir)
        digests = file_digests(weights_dir)
    if not digests:
        raise WeightUpdateError(f"{weights_dir}: no tensors to check the servers against")
    return digests


def mismatches(expected: dict[str, str], loaded: dict[str, str]) -> list[str]:
    """Names of the tensors that differ, are missing or are extra, each with what is wrong."""
    problems = []
    for name in sorted(expected.keys() | loaded.keys()):
        want, got = expected.get(name), loaded.get(name)
        if name == LM_HEAD and want is None:
            want = expected.get(EMBEDDING)  # a tied head is reloaded as a copy of the embedding
        if want != got:
            problems.append(f"{name} ({'missing' if got is None else 'unexpected' if want is None else 'differs'})")
    return problems


async def verify_loaded(http: httpx.AsyncClient, url: str, expected: dict[str, str], timeout_s: float) -> None:
    """Raise WeightUpdateError unless every worker of the server at `url` loaded exactly `expected`."""
    per_worker = await client.loaded_weight_digests(http, url, timeout_s)
    _check(expected, [(f"server {url} (worker {rank}) loaded", got) for rank, got in enumerate(per_worker)])


def verify_files(weights_dir: str | Path, expected: dict[str, str]) -> None:
    """Raise WeightUpdateError unless the files of `weights_dir` hold exactly `expected`:
    the check of an update, made in this process before any server pauses (a worker's
    own digest pass would stall its engine, which runs it between generation steps)."""
    _check(expected, [(f"{weights_dir} holds", file_digests(weights_dir))])


async def verify_loaded_from(http: httpx.AsyncClient, url: str, weights_dir: str, timeout_s: float) -> None:
    """Raise WeightUpdateError unless every worker of the server at `url` last loaded from
    `weights_dir` (the directory `verify_files` checked): a check cheap enough for the pause."""
    for rank, path in enumerate(await client.loaded_from(http, url, timeout_s)):
        if Path(path).resolve() != Path(weights_dir).resolve():
            raise WeightUpdateError(
                f"server {url} (worker {rank}) loaded from {path}, not {weights_dir}, the directory that was checked"
            )


def _check(expected: dict[str, str], readings: list[tuple[str, dict[str, str]]]) -> None:
    """Raise WeightUpdateError at the first reading ("who did what", digests) that differs from `expected`."""
    for who, got in readings:
        problems = mismatches(expected, got)
        if problems:
            raise WeightUpdateError(
                f"{who} weights that differ from the exported ones in "
                f"{len(problems)} of {len(expected)} tensors: {', '.join(problems[:5])}"
            )


async def verify_same_weights(http: httpx.AsyncClient, urls: list[str], timeout_s: float) -> None:
    """Raise WeightUpdateError unless every server reports the first one's parameter checksums."""
    sums = await asyncio.gather(*(client.weight_checksums(http, url, timeout_s) for url in urls))
    reference = sums[0]
    for url, other in zip(urls[1:], sums[1:]):
        if other != reference:
            differ = sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))
            raise WeightUpdateError(f"server {url} weights differ from {urls[0]} after the update: {differ[:5]}")
