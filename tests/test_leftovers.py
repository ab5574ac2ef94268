"""The leftover-process guard (tests/leftovers.py) reports what outlives a test or a
wider fixture, and nothing that ends in time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.leftovers import SCOPE_ENV, LeftoverProcessError, check_no_leftovers, new_token, processes_with

REPO = Path(__file__).resolve().parents[1]

INNER = textwrap.dedent("""
    import subprocess
    import pytest

    @pytest.fixture(scope="module")
    def server():
        proc = subprocess.Popen(["sleep", "61"])  # owned by the module, stopped at its end
        yield proc
        proc.kill()
        proc.wait()

    def test_uses_the_server(server):
        assert server.poll() is None

    def test_waits_for_its_child(server):
        subprocess.run(["true"], check=True)

    def test_leaves_a_detached_child(server):
        subprocess.Popen(["sleep", "62"], start_new_session=True)
""")


@pytest.mark.slow
def test_the_guard_names_a_detached_child_and_kills_it(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + ["-p", "no:cacheprovider", "-p", "tests.leftovers", "-q", "test_inner.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out = done.stdout
    assert done.returncode == 1, out[-3000:]
    # One error, at the teardown of the test that left it; the module's server is no leftover.
    assert "3 passed, 1 error" in out, out[-3000:]
    assert "ERROR at teardown of test_leaves_a_detached_child" in out, out[-3000:]
    assert "test test_inner.py::test_leaves_a_detached_child left 1 process(es) running" in out, out[-3000:]
    assert "sleep 62" in out and "sleep 61" not in out, out[-3000:]
    left = subprocess.run(["pgrep", "-f", "^sleep 6[12]$"], capture_output=True, text=True).stdout.split()
    assert left == [], left  # killed by the guard, not left to the next tests


@pytest.mark.slow
def test_a_fixture_wider_than_a_test_is_checked_after_its_own_teardown(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(
        "import subprocess, pytest\n\n"
        '@pytest.fixture(scope="module")\n'
        "def leaky():\n"
        '    yield subprocess.Popen(["sleep", "63"], start_new_session=True)\n\n'
        "def test_one(leaky):\n    pass\n\n"
        "def test_two(leaky):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path)]
        + ["-p", "no:cacheprovider", "-p", "tests.leftovers", "-q", "test_inner.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out = done.stdout
    assert "2 passed, 1 error" in out and "ERROR at teardown of test_two" in out, out[-3000:]
    assert "module-scoped fixture 'leaky' left 1 process(es) running" in out and "sleep 63" in out, out[-3000:]


def test_processes_with_finds_a_token_carrier_and_not_this_process() -> None:
    token = new_token("direct")
    child = subprocess.Popen(["sleep", "30"], env={**os.environ, SCOPE_ENV: token})
    try:
        assert processes_with(token) == {child.pid: "sleep 30 "}
        with pytest.raises(LeftoverProcessError, match=rf"pid {child.pid}: sleep 30"):
            check_no_leftovers(token, "this check", grace_s=0.5)
        child.wait(5)  # killed by the check
        assert processes_with(token) == {}
    finally:
        child.kill()
        child.wait()


def test_a_carrier_read_before_its_exec_has_laid_out_its_environment_is_found() -> None:
    # Between Popen's return and the kernel's set-up of the new stack a child's environ
    # reads empty (a window of microseconds, milliseconds under the suite's load). Here a
    # shell started with no environment stays young and empty for 0.2 s, then execs the
    # carrier in its place.
    token = new_token("exec")
    child = subprocess.Popen(["/bin/sh", "-c", f"sleep 0.2; {SCOPE_ENV}={token} exec sleep 30"], env={})
    try:
        assert processes_with(token) == {child.pid: "sleep 30 "}
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ends_within_the_grace_period_is_no_leftover() -> None:
    token = new_token("grace")
    child = subprocess.Popen(["sleep", "1"], env={**os.environ, SCOPE_ENV: token})
    started = time.monotonic()
    check_no_leftovers(token, "this check", grace_s=10)
    assert time.monotonic() - started < 5
    child.wait()
