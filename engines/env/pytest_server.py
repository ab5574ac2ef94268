"""A pytest that is already started, inside one sandbox: forks a fresh child per run.

Run by `warm_pytest.py` as `python pytest_server.py` inside bubblewrap, over one
repository copy. It imports pytest and its built-in plugins once (the 0.2-0.3 s that
dominates a targeted test run) and freezes them out of the garbage collector's view
(each run ends with full collections that would otherwise walk them), then serves
one run per request line on stdin:

    {"nonce": "...", "args": [...pytest args...], "cpu_s": 60, "timeout_s": 120, "output_bytes": 1048576}

and answers one line on stdout:

    {"nonce": "...", "exit_code": 1, "output": "...", "truncated": false, "timed_out": false}

Each run is a fork: the child drops the request and answer pipes before any test
code runs, becomes its own session, takes the CPU-time limit, offers itself first
to the OOM killer, and calls `pytest.main(args)` in the repository with its output
on a fresh pipe. When the child is done (or the wall clock runs out) every other
process of the sandbox is killed (`kill(-1)` from PID 1) and reaped, so nothing a
test started survives into the next run, and /tmp and /dev/shm are emptied (the
rest of the sandbox outside the repository is read-only).

The server is the sandbox's PID 1 (no bubblewrap init holding its pipes) and is not
dumpable, so a test can neither ptrace it nor open its pipes through /proc/1/fd;
as PID 1 it ignores signals sent from inside the namespace. Each answer carries
its request's nonce, so a line that is not the answer to the current request is
detected by the host.

Standard library and pytest only: this file runs with the grading interpreter and
imports nothing from tandem-rl.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import resource
import select
import signal
import sys
import time
import traceback

import pytest

PR_SET_DUMPABLE = 4
REPO = os.getcwd()


def main() -> None:
    if os.getpid() != 1:  # kill(-1) below must only ever reach the sandbox's own processes
        sys.exit("pytest_server.py runs only as PID 1 of a bubblewrap sandbox (bwrap --unshare-pid --as-pid-1)")
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    requests = os.fdopen(0, "r")
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints of the server never corrupt the answers
    _preload()
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in requests:
        request = json.loads(line)
        print(json.dumps(run(request, keep=(0, answers.fileno()))), file=answers, flush=True)


def _preload() -> None:
    """Import what every `pytest.main` imports, then move it all to the collector's
    permanent generation: each forked run then starts at about 45 ms instead of 70."""
    try:
        from _pytest.config import default_plugins  # the plugins pytest.main imports by name
    except ImportError:  # another pytest layout: runs only start slower
        default_plugins = ()
    for name in default_plugins:
        try:
            importlib.import_module(f"_pytest.{name}")
        except ImportError:
            pass
    gc.freeze()


def run(request: dict, keep: tuple[int, int]) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the server's channels survives into test code
        os.close(read_fd)
        _child(request, write_fd, keep)
    os.close(write_fd)
    exited = os.pidfd_open(pid)
    kept = _Kept(request["output_bytes"])
    timed_out = _collect(read_fd, exited, kept, time.monotonic() + request["timeout_s"])
    os.close(read_fd)
    os.close(exited)
    exit_code = _finish(pid, timed_out)
    _empty("/tmp")
    _empty("/dev/shm")
    output, truncated = kept.text()
    return {
        "nonce": request["nonce"],
        "exit_code": exit_code,
        "output": output,
        "truncated": truncated,
        "timed_out": timed_out,
    }


def _child(request: dict, out_fd: int, keep: tuple[int, int]) -> None:
    code = 3
    try:
        for fd in keep:
            os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        os.setsid()
        cpu = int(request["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os.chdir(REPO)
        sys.path[0] = REPO  # as `python -m pytest` run in the repository
        sys.argv = ["pytest", *request["args"]]
        code = int(pytest.main(request["args"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Kept:
    """The first quarter and the last three quarters of `cap` output bytes (as the cold runner keeps)."""

    def __init__(self, cap: int) -> None:
        self.head_cap, self.tail_cap = cap // 4, cap - cap // 4
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.tail_cap:
            self.dropped += len(self.tail) - self.tail_cap
            del self.tail[: len(self.tail) - self.tail_cap]

    def text(self) -> tuple[str, bool]:
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", "replace"), self.dropped > 0


def _collect(fd: int, exited: int, kept: _Kept, deadline: float) -> bool:
    """Read the child's output into `kept` until it exits (`exited`: its pidfd) or the
    deadline (then True). Processes the child left behind do not hold the run open:
    a sandbox also ends when its command does."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        ready, _, _ = select.select([fd, exited], [], [], remaining)
        if fd in ready:
            data = os.read(fd, 65536)
            if not data:  # every writer is gone
                return False
            kept.add(data)
        elif exited in ready:  # the child is done: take what it wrote, no more
            os.set_blocking(fd, False)
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    return False
                if not data:
                    return False
                kept.add(data)


def _finish(pid: int, timed_out: bool) -> int | None:
    """Kill every other process of the sandbox, reap them all; the child's exit code."""
    status = None
    try:
        os.kill(-1, signal.SIGKILL)  # as PID 1: every process of the namespace but this one
    except ProcessLookupError:  # none left
        pass
    while True:  # as PID 1, orphans are ours to reap too
        try:
            reaped, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if reaped == pid:
            status = code
    return None if timed_out or status is None else os.waitstatus_to_exitcode(status)


def _empty(directory: str) -> None:
    """Delete everything in `directory` (a writable tmpfs the next run must find empty),
    except read-only mounts inside it (an interpreter installed under /tmp), which are
    not even walked."""
    made = []
    for root, dirs, files in os.walk(directory, topdown=True):
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d))]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        made += [os.path.join(root, d) for d in dirs]
    for path in reversed(made):  # deepest first
        try:
            os.rmdir(path)  # fails, as it should, on a folder that holds a mount
        except OSError:
            pass


if __name__ == "__main__":
    main()
