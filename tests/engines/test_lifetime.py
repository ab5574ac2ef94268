"""exit_with_parent: a child started with it does not outlive its parent, even when
the parent is killed with SIGKILL (no exit handler runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from tests.processes import kill, running

REPO = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent("""
    import functools, os, subprocess, sys, time
    from engines.lifetime import exit_with_parent
    keep = functools.partial(exit_with_parent, os.getpid()) if sys.argv[1] == "bound" else None
    child = subprocess.Popen(["sleep", "120"], preexec_fn=keep, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _alive(proc: psutil.Process) -> bool:
    return running(proc)


def _orphan_after_parent_killed(mode: str) -> psutil.Process:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, env=env)
    child = psutil.Process(int(parent.stdout.readline()))  # a handle while it runs: its pid may be reused after
    parent.kill()
    parent.wait()
    return child


def test_child_is_stopped_when_its_parent_is_killed():
    bound, free = _orphan_after_parent_killed("bound"), _orphan_after_parent_killed("free")
    try:
        deadline = time.monotonic() + 10
        while _alive(bound) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(bound)
        assert _alive(free)  # without it the child lives on: the test can tell the difference
    finally:
        for proc in (bound, free):
            kill(proc)


# A lane as the run starts it: its own session, a parent-death SIGTERM that it (like a
# Prefect flow run) does not act on at once, a child in its group (torchrun) and one in
# a session of its own that does not watch the owner itself (a torchrun rank still
# importing torch).
OWNER = textwrap.dedent("""
    import functools, os, subprocess, sys, time
    from engines.lifetime import exit_with_parent, owner_env
    lane = subprocess.Popen(
        [sys.executable, "-c", sys.argv[2], sys.argv[1]],
        env={**os.environ, **owner_env()},
        start_new_session=True,
        preexec_fn=functools.partial(exit_with_parent, os.getpid()),
    )
    print("lane", lane.pid, flush=True)
    time.sleep(120)
""")
LANE = textwrap.dedent("""
    import signal, subprocess, sys, time
    from engines.lifetime import end_with_owner
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.argv[1] == "bound":
        end_with_owner()
    group = subprocess.Popen(["sleep", "120"])
    rank = subprocess.Popen(["sleep", "120"], start_new_session=True)
    print("children", group.pid, rank.pid, flush=True)
    time.sleep(120)
""")


def _lane_tree_after_owner_killed(mode: str) -> list[psutil.Process]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, mode, LANE], stdout=subprocess.PIPE, env=env, start_new_session=True
    )
    # The owner and the lane write to the same pipe: under load the lane's line can come first.
    lines = [owner.stdout.readline().decode().split() for _ in range(2)]
    pids = {words[0]: words[1:] for words in lines}
    lane, group, rank = (psutil.Process(int(pid)) for pid in pids["lane"] + pids["children"])
    owner.kill()
    owner.wait()
    return [lane, group, rank]


def test_a_lane_its_group_and_its_own_session_children_end_with_a_killed_owner():
    bound, free = _lane_tree_after_owner_killed("bound"), _lane_tree_after_owner_killed("free")
    try:
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in bound) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p for p in bound if _alive(p)] == []
        assert all(_alive(p) for p in free)  # without end_with_owner they live on: the test can tell
    finally:
        for proc in bound + free:
            kill(proc)


def test_the_owners_start_time_does_not_move_with_the_boot_time(monkeypatch):
    """The kernel derives the boot time from the wall clock, so two processes can read
    it a second apart: a start time built on it made a lane take its live owner for
    gone and kill itself at once (exit code -9)."""
    import psutil._pslinux as pslinux

    from engines.lifetime import OWNER_ENV, owner_env

    before = owner_env()[OWNER_ENV]
    boot = psutil.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: boot + 1.0)
    assert owner_env()[OWNER_ENV] == before
