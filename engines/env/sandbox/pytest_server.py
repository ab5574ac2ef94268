"""A pytest that is already started, inside one sandbox: forks a fresh child per run.

Run by `warm_pytest.py` as `python pytest_server.py` inside bubblewrap, over one
repository copy. It imports pytest and its built-in plugins once (the 0.2-0.3 s that
dominates a targeted test run) and freezes them out of the garbage collector's view
(each run ends with full collections that would otherwise walk them), then serves
one run per request line on stdin:

    {"nonce": "...", "args": [...pytest args...], "cpu_s": 60, "timeout_s": 120, "output_bytes": 1048576}

and answers one line on stdout:

    {"nonce": "...", "exit_code": 1, "output": "...", "truncated": false, "timed_out": false}

A request with `"runner": "plain"` and `"tests": ["test_m.py::test_f", ...]` runs
plain test functions without pytest (`_plain`): the child imports the test files
and calls the named functions in order, as pytest would run those node ids, and
prints one result line, `PLAIN_RESULT <nonce> {"status": {...}, "exit_code": N}`,
the status map a log parser would read from pytest's log. It prints
`{"status": null}` where pytest might decide differently (a test that reaches for
pytest, a KeyboardInterrupt, an exception of a type defined outside the builtins);
output of the tests themselves also makes the host run pytest instead.

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

Started as `pytest_server.py --judge`, it never imports pytest and serves the strict
judge instead (engines/env/judge.py): each request's child runs the judge's script
(`{"script": ..., "argv": [...]}`) in the repository, under the same limits.

Standard library and pytest only: this file runs with the grading interpreter and
imports nothing from tandem-rl.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import inspect
import json
import os
import resource
import select
import signal
import sys
import time
import traceback
import types

# `--judge`: the strict judge's server (engines/env/judge.py), which must never load pytest.
JUDGE_ONLY = sys.argv[1:] == ["--judge"]
if not JUDGE_ONLY:
    import pytest

PR_SET_DUMPABLE = 4
REPO = os.getcwd()
PLAIN_RESULT = ">>>>> plain runner result"
# Names pytest gives a meaning to in a test module's namespace (xunit setup, marks,
# plugins, collection switches): a module holding one is left to pytest.
_PYTEST_NAMES = frozenset(
    {
        "__test__",
        "pytestmark",
        "pytest_plugins",
        "setup_module",
        "teardown_module",
        "setUpModule",
        "tearDownModule",
        "setup_function",
        "teardown_function",
        "setup",
        "teardown",
    }
)
_PYTEST_MODULES = ("pytest", "_pytest", "pluggy")


def main() -> None:
    if os.getpid() != 1:  # kill(-1) below must only ever reach the sandbox's own processes
        sys.exit("pytest_server.py runs only as PID 1 of a bubblewrap sandbox (bwrap --unshare-pid --as-pid-1)")
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    requests = os.fdopen(0, "r")
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints of the server never corrupt the answers
    if not JUDGE_ONLY:
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
        if JUDGE_ONLY:
            code = _judge(request["script"], request["argv"])
        elif request.get("runner") == "plain":
            code = _plain(request["tests"], request["nonce"])
        else:
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


def _judge(script: str, argv: list[str]) -> int:
    """The strict judge's script (judge_script.py, sent with the request) as `python -c
    SCRIPT ARGV...` would run it; it prints its own answer line."""
    sys.argv = ["-c", *argv]
    exec(compile(script, "judge_script.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    return 0


class _PytestImports:
    """A meta path finder that refuses, and remembers, imports of pytest: code under
    test that reaches for pytest (a skip, a fixture, a mark) is left to pytest."""

    def __init__(self) -> None:
        self.seen = False

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".", 1)[0] in _PYTEST_MODULES:
            self.seen = True
            raise ImportError(f"{name} is not available to the plain runner")
        return None


def _plain(tests: list[str], nonce: str) -> int:
    """Run the plain test functions `tests` (`file.py::name`, files at the repository's
    root) as `pytest tests` runs them, and print the result line; pytest's exit code.

    As pytest: every test file is imported first (pytest collects before it runs), and
    a file that fails to import is a collection error (`ERROR file.py`, no test runs),
    except SystemExit, which pytest reports as an internal error (no status at all);
    then each test runs in the order given, PASSED or FAILED on any exception.
    """
    guard = _PytestImports()
    for name in [m for m in sys.modules if m.split(".", 1)[0] in _PYTEST_MODULES]:
        del sys.modules[name]  # already imported by the server: an import must reach the guard
    sys.meta_path.insert(0, guard)
    status: dict[str, str] | None = {}
    code = 0
    modules = {}
    for path in dict.fromkeys(t.split("::", 1)[0] for t in tests):
        try:
            modules[path] = importlib.import_module(path[: -len(".py")])
        except SystemExit:
            status, code = {}, 3
            break
        except Exception as exc:
            if not _builtin(exc):
                status = None
                break
            status[path], code = "ERROR", 2
        except BaseException:  # KeyboardInterrupt and the like: pytest stops in its own ways
            status = None
            break
    if status is not None and code == 0:
        # What pytest would collect, checked before any test runs (pytest collects first).
        named = {node: vars(modules[node.split("::", 1)[0]]).get(node.split("::", 1)[1]) for node in tests}
        if any(_PYTEST_NAMES & vars(m).keys() for m in modules.values()) or not all(
            map(_plain_function, named.values())
        ):
            status = None
    if status is not None and code == 0:
        for node, test in named.items():
            try:
                test()
                status[node] = "PASSED"
            except KeyboardInterrupt:  # pytest ends the session and reports what ran before
                status = None
                break
            except BaseException as exc:
                if not _builtin(exc):  # pytest's own outcomes, unittest's SkipTest, ...
                    status = None
                    break
                status[node], code = "FAILED", 1
    if guard.seen:
        status = None
    sys.stdout.flush()
    sys.stderr.flush()
    line = f"{PLAIN_RESULT} {nonce} {json.dumps({'status': status, 'exit_code': code})}\n"
    os.write(1, line.encode())
    return code


def _builtin(exc: BaseException) -> bool:
    return type(exc).__module__ == "builtins"


def _plain_function(test: object) -> bool:
    """A function pytest would call with no arguments and nothing around it."""
    return (
        isinstance(test, types.FunctionType)
        and test.__code__.co_argcount == 0
        and not test.__code__.co_kwonlyargcount
        and not test.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR)
        and not hasattr(test, "pytestmark")
        and getattr(test, "__test__", True) is True
    )


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
