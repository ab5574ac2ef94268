"""Live processes as the tests look for them, through psutil: zombies left out (a
zombie has exited; only its reaper is missing)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import psutil


def live(pred: Callable[[str, int], bool]) -> list[tuple[int, str]]:
    """(pid, command line) of each live process whose command line and parent pid satisfy `pred`."""
    out = []
    for proc in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or not info["cmdline"]:
            continue
        cmd = " ".join(info["cmdline"])
        if pred(cmd, info["ppid"]):
            out.append((info["pid"], cmd))
    return out


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie)."""
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def running(proc: psutil.Process) -> bool:
    """Whether the process `proc` was taken for is live. Unlike a pid, a handle does not
    follow the pid to a new process: pids wrap at 32,768 here, and the suite starts
    thousands of processes and threads."""
    with contextlib.suppress(psutil.Error):
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    return False


def kill(proc: psutil.Process) -> None:
    """SIGKILL to `proc` if it still runs; never to another process that took its pid since,
    which may be another test's."""
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.kill()  # psutil checks the process's start time first
