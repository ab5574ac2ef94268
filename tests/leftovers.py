"""A test, or a fixture wider than a test, fails when a process it started outlives
it (a pytest plugin, loaded by tests/conftest.py).

While a test runs, and while a module-, class-, package- or session-scoped fixture
sets up, os.environ holds TANDEM_TEST_SCOPE=<token of that test or fixture>. Every
process started from there with an environment derived from os.environ carries the
token in /proc/<pid>/environ, orphans reparented to init included. After the test's
teardown (for a fixture: after its own teardown, since it may own a server across
tests) the processes still carrying the token get a grace period to exit; those
left are killed and named in the failure.

Not seen: processes started with an environment built from scratch (sandboxed
commands, which bubblewrap and cgroups end), and children forked without exec (their
/proc environ is the one their parent started with).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import signal
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

SCOPE_ENV = "TANDEM_TEST_SCOPE"
GRACE_S = 10.0
SETTLE_S = 2.0  # longest wait for a process in the midst of exec
YOUNG_S = 5.0  # a process started longer ago is not in the midst of its first exec


class LeftoverProcessError(AssertionError):
    """Processes that outlived the test or fixture that started them."""


def new_token(name: str) -> str:
    """A token unique to one test or one fixture instance (reruns included)."""
    return hashlib.sha256(f"{name}:{uuid.uuid4()}".encode()).hexdigest()[:16]


def _stat(proc: Path) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name: [0] is the state, [19]
    the start time in clock ticks since boot."""
    return (proc / "stat").read_text().rsplit(")", 1)[1].split()


def _environ(proc: Path) -> bytes:
    """The environment of `proc`. A process in the midst of exec reads empty until the
    kernel has laid out its new stack, and Popen returns before that (at exec's close of
    the error pipe): under load, one read in eight right after Popen. A young process
    that reads empty is read again for up to SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while not (environ := (proc / "environ").read_bytes()) and time.monotonic() < deadline:
        stat = _stat(proc)
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        if stat[0] in ("Z", "X") or uptime_s - int(stat[19]) / os.sysconf("SC_CLK_TCK") > YOUNG_S:
            break  # ended, or empty for good (started with no environment)
        time.sleep(0.01)
    return environ


def processes_with(token: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries `token`
    (this process and zombies left out; threads are not listed in /proc's top level)."""
    needle = f"{SCOPE_ENV}={token}".encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if _stat(proc)[0] in ("Z", "X") or needle not in _environ(proc).split(b"\0"):
                continue
            found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return found


def check_no_leftovers(token: str, owner: str, grace_s: float = GRACE_S) -> None:
    """Raise LeftoverProcessError naming the processes that carry `token` after
    `grace_s` seconds (they are killed first, so later tests start clean)."""
    deadline = time.monotonic() + grace_s
    while (left := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    listed = "\n".join(f"  pid {pid}: {cmd.strip()[:300]}" for pid, cmd in sorted(left.items()))
    raise LeftoverProcessError(
        f"{owner} left {len(left)} process(es) running {grace_s:.0f} s after it ended:\n{listed}"
    )


@contextlib.contextmanager
def _scope(token: str) -> Generator[None, None, None]:
    previous = os.environ.get(SCOPE_ENV)
    os.environ[SCOPE_ENV] = token
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SCOPE_ENV, None)
        else:
            os.environ[SCOPE_ENV] = previous


_TEST_TOKEN = pytest.StashKey[str]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    token = new_token(item.nodeid)
    item.stash[_TEST_TOKEN] = token
    os.environ[SCOPE_ENV] = token  # until the test's teardown: setup, call and teardown start processes
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        os.environ.pop(SCOPE_ENV, None)
        token = item.stash.get(_TEST_TOKEN, None)
        if token is not None:
            check_no_leftovers(token, f"test {item.nodeid}")


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[Any, Any, Any]:
    if fixturedef.scope == "function":  # checked with its test, after the test's teardown
        return (yield)
    token = new_token(f"{fixturedef.baseid}::{fixturedef.argname}")
    # Added before the fixture's own teardown is, so it runs after it (finalizers run last-in first-out).
    owner = f"{fixturedef.scope}-scoped fixture {fixturedef.argname!r}"
    fixturedef.addfinalizer(functools.partial(check_no_leftovers, token, owner))
    with _scope(token):
        return (yield)
