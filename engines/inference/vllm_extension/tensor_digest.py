"""Digests of the tensors in a safetensors directory: one function for both sides of a weight update.

The exporter writes them beside the weights (`tensor-digests.json`); a vLLM worker
computes them again over the files it reloaded from (`ExactReloadExtension`), and
the pool compares the two (engines/inference/weight_files.py). One digest per
tensor name, over its dtype, shape and raw bytes as stored, so the check is exact
and does not depend on how vLLM re-lays weights out after loading (fused q/k/v or
gate/up projections, the CPU build's packed experts, removed linear weights).

Imported both by tandem and, inside the vLLM server, as a top-level module (this
folder is on the server's PYTHONPATH): standard library, torch and safetensors only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open

DIGESTS_FILE = "tensor-digests.json"


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (exact: equal only for equal tensors)."""
    h = hashlib.sha256(f"{tensor.dtype}:{list(tensor.shape)}:".encode())
    h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def file_digests(weights_dir: str | Path) -> dict[str, str]:
    """Every tensor of the directory's *.safetensors files (links followed) -> its digest."""
    digests: dict[str, str] = {}
    for file in sorted(Path(weights_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                digests[name] = tensor_digest(f.get_tensor(name))
    return digests


def write_digests(weights_dir: str | Path) -> dict[str, str]:
    """Compute the directory's digests and write them to `DIGESTS_FILE` in it.
    The caller commits the directory as a whole (storage.atomic_dir)."""
    digests = file_digests(weights_dir)
    (Path(weights_dir) / DIGESTS_FILE).write_text(json.dumps({"tensors": digests}, indent=1, sort_keys=True))
    return digests


def read_digests(weights_dir: str | Path) -> dict[str, str] | None:
    """The digests written by `write_digests`, or None when the directory has none."""
    path = Path(weights_dir) / DIGESTS_FILE
    if not path.is_file():
        return None
    return dict(json.loads(path.read_text())["tensors"])
