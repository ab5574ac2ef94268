"""Run one shell command against a repository copy, contained.

What the bubblewrap backend protects against (each is tested):
  - network access: every namespace is unshared; only loopback exists inside;
  - reading or writing outside the repository: the root is empty except read-only
    system directories, the sandbox's Python installation (pytest alone, with the base
    interpreter's own site-packages shown empty: interpreter.py) and the task's own
    dependency folder (deps.py); the repository copy is the
    only writable bind (at /repo); /tmp is a private tmpfs;
  - fork bombs and memory bombs: cgroup (v2 or v1) pids and memory caps on the whole tree;
  - busy loops and sleeps: CPU-time rlimit, and a wall-clock timeout that kills
    bubblewrap, whose pid namespace takes every descendant with it;
  - huge files and output: file-size rlimit; output kept to `output_bytes`;
  - killing the parent: the tree runs in its own pid namespace and session, and
    dies with its parent (`--die-with-parent`);
  - inherited secrets: the environment is cleared; capabilities are dropped.
What it does not protect against: kernel exploits, and code that tampers with the
test runner from inside the process under test (the grader filters patches, which
closes the known conftest/test-file hacks; see grader.py).

The unsandboxed backend exists for machines without bubblewrap, only behind
`EnvConfig.allow_unsandboxed`, and logs a warning on every run.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from engines.env.config import EnvConfig, SandboxLimits
from engines.env.errors import SandboxUnavailableError
from engines.env.sandbox.cgroup import CgroupCaps, unavailable
from engines.env.sandbox.deps import DEPS_VAR, SANDBOX_DEPS, command_deps, deps_root
from engines.env.sandbox.interpreter import SYSTEM_DIRS, python_layout
from engines.lifetime import signal_group

log = logging.getLogger(__name__)

SANDBOX_REPO = "/repo"  # where the repository copy appears inside the sandbox
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf")
_cgroup_warned = False


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None  # None when killed by the timeout or never started
    output: str  # stdout and stderr interleaved, truncated to limits.output_bytes
    timed_out: bool
    truncated: bool
    duration_s: float
    started: bool = True  # False: the sandbox itself failed (an infrastructure failure)
    infra_message: str = ""
    oom: bool = False


class Runner(Protocol):
    def run(
        self, command: str, repo: Path, extra_env: dict[str, str] | None = None, deps: Sequence[str] | None = None
    ) -> RunResult:
        """Run `command` in `repo`; `deps`: the dependency folders it may see (None: those
        the command names, deps.command_deps)."""
        ...


def make_runner(config: EnvConfig) -> Runner:
    """The backend `config` asks for; a clear error when bubblewrap is missing."""
    if config.backend == "unsandboxed":
        return UnsandboxedRunner(config)
    return BwrapRunner(config)


class BwrapRunner:
    def __init__(self, config: EnvConfig):
        bwrap = shutil.which(config.bwrap_path)
        if bwrap is None:
            raise SandboxUnavailableError(
                f"bubblewrap ({config.bwrap_path!r}) was not found. Install it: "
                "'sudo apt-get install bubblewrap' (Debian/Ubuntu) or 'sudo dnf install bubblewrap', "
                "or run scripts/setup.sh. To run without a sandbox (unsafe) set "
                "backend='unsandboxed' and allow_unsandboxed=True."
            )
        self.config = config
        self.bwrap = bwrap
        self._python = python_layout(config.python)

    def argv(
        self,
        repo: Path,
        status_fd: int | None = None,
        read_only: dict[str, str] | None = None,
        deps: Sequence[str] = (),
    ) -> list[str]:
        """bubblewrap's arguments up to the command: `repo` read-write at SANDBOX_REPO,
        `read_only` host paths bound read-only at the given sandbox paths, and the
        dependency folders `deps` (deps.py keys) at SANDBOX_DEPS."""
        args = [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--hostname",
            "sandbox",
        ]
        if status_fd is not None:
            args += ["--json-status-fd", str(status_fd)]
        for d in SYSTEM_DIRS:
            args += ["--ro-bind-try", d, d]
        for f in _SYSTEM_FILES:
            args += ["--ro-bind-try", f, f]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
        # After the /tmp tmpfs, so an interpreter installed under /tmp (a venv there) stays visible.
        for d in self._python.binds:
            args += ["--ro-bind", d, d]
        for d in self._python.hidden:  # e.g. the base interpreter's site-packages: a venv never imports it
            args += ["--tmpfs", d, "--remount-ro", d]
        # The project's own dependency folders (deps.py), read-only; no other project's.
        for key in deps:
            args += ["--ro-bind-try", str(deps_root() / key), f"{SANDBOX_DEPS}/{key}"]
        args += ["--bind", str(repo), SANDBOX_REPO, "--chdir", SANDBOX_REPO]
        for host, inside in (read_only or {}).items():
            args += ["--ro-bind", host, inside]
        # Writable: only the repository, /tmp and /dev/shm (what a warm sandbox wipes between runs).
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        for key, value in _sandbox_env(self.config.python).items():
            args += ["--setenv", key, value]
        return args

    def run(
        self, command: str, repo: Path, extra_env: dict[str, str] | None = None, deps: Sequence[str] | None = None
    ) -> RunResult:
        read_fd, write_fd = os.pipe()
        try:
            argv = self.argv(repo, write_fd, deps=command_deps(command) if deps is None else deps)
            for key, value in (extra_env or {}).items():
                argv += ["--setenv", key, value]
            argv += ["/bin/sh", "-c", command]
            result = _run_capped(argv, None, self.config, pass_fds=(write_fd,), close_after_start=write_fd)
            status = _read_status(read_fd)
        finally:
            os.close(read_fd)
        if "child-pid" not in status and not result.timed_out:
            return RunResult(
                None,
                result.output,
                False,
                result.truncated,
                result.duration_s,
                started=False,
                infra_message=f"bubblewrap failed to start the sandbox: {result.output.strip()[-500:]}",
            )
        if "exit-code" in status and result.exit_code is not None:
            result = replace(result, exit_code=int(status["exit-code"]))
        return result


class UnsandboxedRunner:
    def __init__(self, config: EnvConfig):
        self.config = config

    def run(
        self, command: str, repo: Path, extra_env: dict[str, str] | None = None, deps: Sequence[str] | None = None
    ) -> RunResult:
        # No sandbox, no binds: $TANDEM_DEPS is the whole host folder (`deps` cannot narrow it).
        log.warning("running %r WITHOUT a sandbox in %s (allow_unsandboxed=True)", command[:80], repo)
        env = _sandbox_env(self.config.python, str(deps_root())) | {"HOME": str(repo)} | (extra_env or {})
        return _run_capped(["/bin/sh", "-c", command], env, self.config, cwd=str(repo))


def _run_capped(
    argv: list[str],
    env: dict[str, str] | None,
    config: EnvConfig,
    cwd: str | None = None,
    pass_fds: tuple[int, ...] = (),
    close_after_start: int | None = None,
) -> RunResult:
    """Start `argv` inside fresh cgroups with rlimits; collect capped output; enforce the wall clock."""
    limits = config.limits
    caps = make_caps(config)
    _warn_without_cgroups(config.use_cgroups and caps is None)
    wrapped = capped_argv(argv, limits, caps)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            wrapped,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env if env is not None else {"PATH": "/usr/bin:/bin"},
            cwd=cwd,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        if caps:
            caps.remove()
        return RunResult(None, "", False, False, 0.0, started=False, infra_message=f"could not start {argv[0]}: {exc}")
    if close_after_start is not None:
        os.close(close_after_start)  # only the child holds the write end now, so EOF means it is done
    reader = _CappedReader(proc.stdout, limits.output_bytes)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        signal_group(proc.pid, signal.SIGKILL)
    finally:
        if caps:
            caps.kill_all()
        reader.join(timeout=5)
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    oom = bool(caps and caps.oom_killed())
    if caps:
        caps.remove()
    output, truncated = reader.text()
    code = None if timed_out else proc.returncode
    return RunResult(code, output, timed_out, truncated, time.monotonic() - start, oom=oom)


def make_caps(config: EnvConfig) -> CgroupCaps | None:
    """Fresh cgroups for one sandboxed tree, or None (opted out, or none could be made)."""
    if not config.use_cgroups:
        return None
    return CgroupCaps.create(config.limits.memory_mb, config.limits.max_processes, config.cgroup_root)


def check_caps(config: EnvConfig) -> None:
    """Refuse to start sandboxed work that nothing would cap (see EnvConfig.use_cgroups)."""
    if config.use_cgroups and (missing := unavailable(config.cgroup_root)):
        raise SandboxUnavailableError(
            f"no memory and process caps can be applied to sandboxed commands: {missing}. Run as root on a host "
            "with cgroup v2 (memory and pids controllers) or v1, fix env.cgroup_root, or set env.use_cgroups=false "
            "to opt out explicitly (rlimits only)."
        )


def capped_argv(argv: list[str], limits: SandboxLimits, caps: CgroupCaps | None, cpu_limit: bool = True) -> list[str]:
    """`argv` started inside `caps` with the rlimits of `limits`. The shell joins the
    cgroups before exec'ing prlimit, so no child escapes the caps."""
    join = "".join(f'echo $$ > "{p}" && ' for p in (caps.procs_files() if caps else []))
    rlimits = [f"--cpu={limits.cpu_seconds}"] if cpu_limit else []
    rlimits += [f"--fsize={limits.file_size_mb * 2**20}", "--core=0", "--nofile=1024"]
    return ["/bin/sh", "-c", join + 'exec "$@"', "sh", "prlimit", *rlimits, "--", *argv]


class _CappedReader(threading.Thread):
    """Drains a pipe; keeps the first quarter and the last three quarters of `cap` bytes."""

    def __init__(self, stream, cap: int):
        super().__init__(daemon=True)
        self.stream, self.head_cap, self.tail_cap = stream, cap // 4, cap - cap // 4
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_len = 0
        self.dropped = 0

    def run(self) -> None:
        while chunk := self.stream.read1(65536):
            room = self.head_cap - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_len += len(chunk)
                while self.tail_len - len(self.tail[0]) >= self.tail_cap:
                    self.tail_len -= len(first := self.tail.popleft())
                    self.dropped += len(first)
        self.stream.close()

    def text(self) -> tuple[str, bool]:
        tail = b"".join(self.tail)
        if self.tail_len > self.tail_cap:
            self.dropped += self.tail_len - self.tail_cap
            tail = tail[-self.tail_cap :]
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", "replace"), self.dropped > 0


def _read_status(fd: int) -> dict:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    status: dict = {}
    for line in data.decode(errors="replace").splitlines():
        try:
            status.update(json.loads(line))
        except ValueError:
            continue
    return status


def _sandbox_env(python: str, deps: str = SANDBOX_DEPS) -> dict[str, str]:
    return {
        DEPS_VAR: deps,  # test commands of projects with dependencies put $TANDEM_DEPS/<key> on PYTHONPATH
        "PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # the repo copy is reused; stale .pyc must never mask a patch
        "PYTHONHASHSEED": "0",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # pytest starts ~3x faster; projects needing plugins list them
    }


def _warn_without_cgroups(missing: bool) -> None:
    global _cgroup_warned
    if missing and not _cgroup_warned:
        _cgroup_warned = True
        log.warning("cgroup memory/pids caps could not be created for a command: only rlimits cap it")
