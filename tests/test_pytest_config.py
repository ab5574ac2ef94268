"""The suite's own configuration: a per-test timeout, so a hung service test fails
instead of hanging CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert 60 <= float(request.config.getini("timeout") or 0) <= 900


@pytest.mark.slow
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


def _pytest_in(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """pytest with the project's ini on the files in tmp_path, and the given plugins and options."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + ["-p", "no:cacheprovider", "-q", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


@pytest.mark.slow
def test_a_missing_bwrap_fails_the_run_unless_the_sandbox_tests_are_deselected(tmp_path: Path) -> None:
    (tmp_path / "test_needs.py").write_text(
        "import pytest\n\n@pytest.mark.sandbox\ndef test_sandboxed():\n    pass\n\ndef test_plain():\n    pass\n"
    )
    # Only the interpreter's folder on PATH: no bwrap there.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(REPO)}
    failed = _pytest_in(tmp_path, "-p", "tests.host_requirements", "test_needs.py", env=env)
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert "bubblewrap (bwrap) is not on PATH" in failed.stderr and "-m 'not sandbox'" in failed.stderr, failed.stderr
    deselected = _pytest_in(tmp_path, "-p", "tests.host_requirements", "-m", "not sandbox", "test_needs.py", env=env)
    assert deselected.returncode == 0 and "1 passed, 1 deselected" in deselected.stdout, deselected.stdout[-2000:]


@pytest.mark.slow
def test_the_suite_hands_out_modules_in_the_order_the_conftest_sorts_them(tmp_path: Path) -> None:
    """scripts/test.sh's xdist options keep the collection order (costliest module first):
    with xdist's default reorder, the module with more tests would go out first."""
    command = next(line for line in (REPO / "scripts/test.sh").read_text().splitlines() if "--dist" in line)
    xdist_options = re.search(r"(--dist \S+(?: --no-loadscope-reorder)?)", command)[1].split()
    (tmp_path / "test_many.py").write_text("".join(f"def test_many_{i}():\n    pass\n\n" for i in range(3)))
    (tmp_path / "test_long.py").write_text("def test_long():\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n    items.sort(key=lambda item: 'test_long' not in item.nodeid)\n"
    )
    done = _pytest_in(tmp_path, "-n", "1", *xdist_options, "-rA", env=dict(os.environ))
    ran = re.findall(r"^PASSED (test_\w+)\.py", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and ran[:2] == ["test_long", "test_many"], done.stdout[-2000:]
