"""What `pip install <clone>` gets: every third-party import of the packages is a
declared dependency, the licence and type markers ship, and `tandem --version` works.
(scripts/check_install.sh does the full install into a fresh environment and grades.)"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("flows", "tasks", "engines", "storage")
# Runs inside the vLLM server's own environment, never in tandem's.
OTHER_ENV = REPO / "engines" / "inference" / "vllm_extension"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    return {_normal(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]) for req in PYPROJECT["project"]["dependencies"]}


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> one file importing it, over the installed packages."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if OTHER_ENV in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES and top != "_pytest":
                        found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_every_third_party_import_is_a_declared_dependency() -> None:
    providers = importlib.metadata.packages_distributions()
    # Optional features import their extra lazily and say which extra to install (flows/metrics.py).
    features = {
        _normal(re.split(r"[<>=\[]", r)[0])
        for name, reqs in PYPROJECT["project"]["optional-dependencies"].items()
        if name != "test"
        for r in reqs
    }
    declared = _declared() | features
    undeclared = {}
    for module, where in _third_party_imports().items():
        dists = {_normal(d) for d in providers.get(module, [module])}
        if not dists & declared:
            undeclared[module] = (sorted(dists), where)
    assert not undeclared, f"imported but not in pyproject dependencies: {undeclared}"
    assert {"swebench", "pytest", "numpy"} <= _declared()  # grading needs them in any environment


def test_test_tools_are_an_extra_not_a_runtime_dependency() -> None:
    test_extra = {_normal(re.split(r"[<>=\[]", r)[0]) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert {"moto", "hypothesis", "pytest-timeout"} <= test_extra
    assert not test_extra & _declared()


def test_license_and_type_markers_ship() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert all((REPO / p / "py.typed").is_file() for p in PACKAGES)
    package_data = PYPROJECT["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["*"] and any("vllm_extension" in g for g in package_data["engines.inference"])


def test_version_flag_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"tandem-rl {PYPROJECT['project']['version']}"
