"""Checks that servers hold the weights the trainer exported, with one server or many.

Against the export: every tensor a server's workers loaded must have the digest the
exporter wrote beside the weights (`tensor-digests.json`, computed by
vllm_extension/tensor_digest.py, the same function the workers run). A directory
published without digests (a plain Hugging Face directory) is digested here, once
per update, so the check still proves the servers loaded those files. Needs the
worker extension (`inference.worker_extension`).

Across servers (two or more): vLLM's per-parameter checksums of the loaded model
must be identical, which also covers what the servers did after reading the files.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx

from engines.inference import routes
from engines.inference.vllm_extension.tensor_digest import file_digests, read_digests
from engines.inference.weight_dirs import EMBEDDING, LM_HEAD

log = logging.getLogger(__name__)


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
            want = expected.get(EMBEDDING)  # a tied head is reloaded as a copy of the embedding (weight_dirs.py)
        if want != got:
            problems.append(f"{name} ({'missing' if got is None else 'unexpected' if want is None else 'differs'})")
    return problems


async def verify_loaded(http: httpx.AsyncClient, url: str, expected: dict[str, str], timeout_s: float) -> None:
    """Raise WeightUpdateError unless every worker of the server at `url` loaded exactly `expected`."""
    for rank, loaded in enumerate(await routes.loaded_weight_digests(http, url, timeout_s)):
        problems = mismatches(expected, loaded)
        if problems:
            raise WeightUpdateError(
                f"server {url} (worker {rank}) loaded weights that differ from the exported ones in "
                f"{len(problems)} of {len(expected)} tensors: {', '.join(problems[:5])}"
            )


async def verify_same_weights(http: httpx.AsyncClient, urls: list[str], timeout_s: float) -> None:
    """Raise WeightUpdateError unless every server reports the first one's parameter checksums."""
    sums = await asyncio.gather(*(routes.weight_checksums(http, url, timeout_s) for url in urls))
    reference = sums[0]
    for url, other in zip(urls[1:], sums[1:]):
        if other != reference:
            differ = sorted(k for k in reference.keys() | other.keys() if reference.get(k) != other.get(k))
            raise WeightUpdateError(f"server {url} weights differ from {urls[0]} after the update: {differ[:5]}")
