"""exit_with_parent: a child started with it does not outlive its parent, even when
the parent is killed with SIGKILL (no exit handler runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent("""
    import functools, os, subprocess, sys, time
    from engines.lifetime import exit_with_parent
    keep = functools.partial(exit_with_parent, os.getpid()) if sys.argv[1] == "bound" else None
    child = subprocess.Popen(["sleep", "120"], preexec_fn=keep, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its reaper is missing


def _orphan_after_parent_killed(mode: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, env=env)
    child = int(parent.stdout.readline())
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
        for pid in (bound, free):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
