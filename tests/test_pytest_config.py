"""The suite's own configuration: a per-test timeout, so a hung service test fails
instead of hanging CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert 60 <= float(request.config.getini("timeout") or 0) <= 900


def test_a_hung_test_fails_on_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hang():\n    time.sleep(600)\n")
    # The project's own ini, with only the limit shortened: the plugin and method come from it.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-q",
            "-o",
            "timeout=2",
            str(tmp_path / "test_hang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "Timeout" in done.stdout, done.stdout[-2000:]
