"""Child processes that do not outlive the process that started them.

A run killed by SIGKILL or the OOM killer runs no exit handler, so the servers and
lanes it started (vLLM, the trainer lane, Prefect's server) would keep running,
holding cores, memory and ports. Two mechanisms, because neither covers every case:

- `exit_with_parent` asks the kernel to signal the child when its parent dies
  (Linux PR_SET_PDEATHSIG). It fires when the parent *thread* that forked the child
  ends, it is not inherited by the child's own children, and a catchable signal
  may be handled slowly: a Prefect flow run turns SIGTERM into a teardown that
  reports to the (dead) API server, retrying for minutes.
- `owner_env` + `end_with_owner`: the owner puts its pid (and start time, against
  pid reuse) into the child's environment; every process of the tree that calls
  `end_with_owner` (the trainer lane, each torchrun rank) watches that process and,
  when it is gone however it ended, SIGKILLs its descendants (torchrun starts its
  ranks in sessions of their own, out of reach of a group kill), its group and itself.

Use `exit_with_parent` as `subprocess.Popen(..., preexec_fn=functools.partial(exit_with_parent, os.getpid()))`
from a thread that lives as long as the child should.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading

import psutil

OWNER_ENV = "TANDEM_OWNER"
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
_PR_SET_PDEATHSIG = 1
# Resolved once here: the child, between fork and exec, only calls it.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def exit_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child before exec: `sig` when `parent` dies (no-op off Linux)."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def exit_with_parent_now(sig: int = signal.SIGKILL) -> None:
    """`exit_with_parent` from inside a running process, for children whose start this
    project does not control (torchrun's ranks)."""
    parent = os.getppid()
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group `pid` leads (a child started with start_new_session);
    nothing when the group is gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_group(proc: subprocess.Popen, grace_s: float, first: int = signal.SIGTERM) -> None:
    """`first` to the group `proc` leads, SIGKILL after `grace_s` seconds, and SIGKILL
    to the group in any case: its workers may outlive a leader killed from outside."""
    if proc.poll() is None:
        signal_group(proc.pid, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _start_time(pid: int) -> str | None:
    """The process's start time, as text equal for one process however often and from
    wherever it is read; None when it is gone or a zombie.

    On Linux it is the start in clock ticks since boot (/proc/PID/stat): psutil's
    create_time adds the boot time, which the kernel derives from the wall clock, so
    two processes can read one start a second apart and the owner would seem gone."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _GONE:
            return None
    except psutil.Error:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]  # field 22, after the name
    except (OSError, IndexError):  # no procfs
        with contextlib.suppress(psutil.Error):
            return repr(proc.create_time())
        return None


def owner_env(pid: int | None = None) -> dict[str, str]:
    """The environment entry naming `pid` (default: this process) as the owner of a child's tree."""
    pid = os.getpid() if pid is None else pid
    return {OWNER_ENV: f"{pid}:{_start_time(pid)}"}


def end_with_owner() -> threading.Thread | None:
    """When this process's environment names an owner (`owner_env`): a daemon thread
    that SIGKILLs this process's descendants, its group and itself once the owner has
    exited. Returns the thread, or None without an owner."""
    value = os.environ.get(OWNER_ENV)
    if not value:
        return None
    pid_text, _, started = value.partition(":")
    owner = int(pid_text)
    watcher = threading.Thread(target=_watch, args=(owner, started), name="end-with-owner", daemon=True)
    watcher.start()
    return watcher


def _watch(owner: int, started: str) -> None:
    fd = None
    with contextlib.suppress(OSError, AttributeError):  # pidfd: Linux 5.3+, Python 3.9+
        fd = os.pidfd_open(owner)
    # Checked after opening: a pid reused by another process since does not count as the owner.
    if _start_time(owner) == started:
        if fd is not None:
            select.select([fd], [], [])  # readable once the owner has exited
        else:
            while _start_time(owner) == started:
                threading.Event().wait(0.25)
    _kill_tree()


def _descendants() -> list[int]:
    """Every live descendant of this process, by parent pid."""
    with contextlib.suppress(psutil.Error):
        return [p.pid for p in psutil.Process().children(recursive=True)]
    return []


def _kill_tree() -> None:
    """SIGKILL every descendant, this process's group (when it leads one) and itself.

    Descendants are found through the parent links, so the ones in sessions of their
    own (torchrun's ranks, still importing before they could watch the owner
    themselves) go too. They are stopped first: a killed parent's children would be
    reparented out of reach, and a stopped process starts no new ones."""
    stopped: set[int] = set()
    for _ in range(3):
        fresh = [pid for pid in _descendants() if pid not in stopped]
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped.update(fresh)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A group kill would hit others when this process does not lead the group.
    if os.getpgid(0) == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
