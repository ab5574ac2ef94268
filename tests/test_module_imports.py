"""Every module of the four packages imports: an import-time error (a renamed name, a
missing dependency, a circular import) fails here even in a module no other test
imports. The vLLM worker extension is left out: it runs inside the vLLM server's own
environment, where vLLM is installed, and its tests start such a server."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("flows", "tasks", "engines", "storage")
OTHER_ENV = REPO / "engines" / "inference" / "vllm_extension"


def modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if OTHER_ENV in path.parents:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_walk_finds_each_package_and_skips_the_vllm_extension() -> None:
    found = modules()
    assert {"flows.rl", "tasks.rollout", "engines.inference.server_fleet", "storage.shards"} <= set(found)
    assert not [m for m in found if "vllm_extension" in m]


@pytest.mark.parametrize("name", modules())
def test_module_imports(name: str) -> None:
    importlib.import_module(name)
