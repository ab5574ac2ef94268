"""Targeted pytest runs in a sandbox that stays up: pytest is imported once per
repository copy, each run is a fresh fork (`pytest_server.py`).

Why: a targeted run of a few tests costs 0.3-0.5 s on a small CPU, and most of it
is starting Python and importing pytest, paid again for every graded episode. A
warm sandbox pays it once per copy; a run then costs the fork, the collection of
the named test files and the tests themselves.

Isolation is what the cold runner gives, per run: the same bubblewrap sandbox
(namespaces, read-only system, the copy at /repo, cleared environment, no
capabilities), the same cgroup caps on the sandbox and the same rlimits; after
each run every process but the server is killed and /tmp emptied (inside the
server); the grader resets the copy between runs, as before. The server is the
sandbox's PID 1 and not dumpable, so tests cannot reach its pipes; an answer that
does not carry the request's nonce restarts the sandbox and runs the tests again
in a fresh one. A sandbox whose server died or hung is closed; the next run starts
a new one.

Only commands of the form `python -m pytest ARGS` go this way (`pytest_args`);
anything else goes to the cold runner. `run_plain` asks the same sandbox to call
plain test functions without pytest (plain_runner.py), under the same limits. A
sandbox started with `judge` imports no pytest at all and serves the strict judge
(`run_judge`, judge.py) the same way: a fork per call instead of a new sandbox.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from engines.env.config import EnvConfig
from engines.env.sandbox.cgroup import CgroupCaps
from engines.env.sandbox.plain_runner import PlainRun, read_answer
from engines.env.sandbox.runner import BwrapRunner, RunResult, capped_argv, make_caps
from engines.lifetime import stop_group

log = logging.getLogger(__name__)

SERVER_SCRIPT = Path(__file__).with_name("pytest_server.py")
_SERVER_IN_SANDBOX = "/opt/tandem/pytest_server.py"
_START_TIMEOUT_S = 60.0
_ANSWER_GRACE_S = 15.0  # beyond the run's own wall limit, which the server enforces


def pytest_args(command: str) -> list[str] | None:
    """The pytest arguments of `python -m pytest ARGS`, or None for any other command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) >= 3 and argv[0] in ("python", "python3") and argv[1:3] == ["-m", "pytest"]:
        return argv[3:]
    return None


class WarmPytest:
    """One warm sandbox over one repository copy. Not thread-safe: one run at a time."""

    def __init__(self, config: EnvConfig, runner: BwrapRunner, repo: Path, judge: bool = False) -> None:
        """`judge`: a server that never imports pytest and runs only the strict judge (`run_judge`)."""
        self.config, self.runner, self.repo, self.judge = config, runner, repo, judge
        self._proc: subprocess.Popen | None = None
        self._caps: CgroupCaps | None = None
        self._stderr: tempfile._TemporaryFileWrapper | None = None
        self.starts = 0

    def run(self, args: list[str]) -> RunResult:
        return self._run({"args": args})[0]

    def run_plain(self, args: list[str], tests: list[str]) -> PlainRun:
        """Call the plain test functions `tests` (`file.py::name`) without pytest; `args`
        (the pytest arguments of the same run) become sys.argv, as for pytest."""
        run, nonce = self._run({"args": args, "runner": "plain", "tests": tests})
        answer = read_answer(run.output, nonce) if run.started and not run.timed_out else None
        if answer is None and run.exit_code == -signal.SIGXCPU:
            # Out of CPU time: pytest, running the same code with more around it, runs out
            # too and leaves a log with no status (rejected).
            answer = ({}, run.exit_code)
        return PlainRun(run, *(answer or (None, None)))

    def run_judge(self, script: str, argv: list[str]) -> RunResult:
        """The strict judge's `script` run as `python -c script *argv` in the repository
        (a server started with `judge`); its answer is in the output."""
        assert self.judge, "the strict judge runs only in a judge server, which never imports pytest"
        return self._run({"args": [], "script": script, "argv": argv})[0]

    def _run(self, fields: dict) -> tuple[RunResult, str]:
        """One run of the request `fields`, and the nonce its answer carried."""
        nonce = secrets.token_hex(16)
        result = self._run_once(fields, nonce)
        if result is None:  # an answer that was not ours: start clean and run it again
            log.warning("warm pytest sandbox over %s answered out of turn; restarted", self.repo)
            self.close()
            nonce = secrets.token_hex(16)
            result = self._run_once(fields, nonce)
        if result is None:
            self.close()
            return RunResult(
                None,
                "",
                False,
                False,
                0.0,
                started=False,
                infra_message="the warm pytest sandbox answered out of turn twice",
            ), nonce
        return result, nonce

    def _run_once(self, fields: dict, nonce: str) -> RunResult | None:
        start = time.monotonic()
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            error = self._start()
            if error:
                return RunResult(None, "", False, False, time.monotonic() - start, started=False, infra_message=error)
        assert self._proc is not None and self._proc.stdin is not None
        limits = self.config.limits
        oom_before = self._caps.oom_events() if self._caps else 0
        request = {
            **fields,
            "nonce": nonce,
            "cpu_s": limits.cpu_seconds,
            "timeout_s": limits.wall_timeout_s,
            "output_bytes": limits.output_bytes,
        }
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
            answer = self._read_line(start + limits.wall_timeout_s + _ANSWER_GRACE_S)
        except (BrokenPipeError, OSError):
            answer = None
        oom = bool(self._caps and self._caps.oom_events() > oom_before)
        if answer is None:  # the server died (the tests broke the sandbox) or hung: this sandbox is done
            timed_out = self._proc.poll() is None
            self.close()
            return RunResult(None, "", timed_out, False, time.monotonic() - start, oom=oom)
        try:
            reply = json.loads(answer)
        except ValueError:
            return None
        if not isinstance(reply, dict) or reply.get("nonce") != nonce:
            return None
        return RunResult(
            reply["exit_code"],
            reply["output"],
            reply["timed_out"],
            reply["truncated"],
            time.monotonic() - start,
            oom=oom,
        )

    def close(self) -> None:
        """Stop the sandbox and everything in it. Safe to call twice."""
        if self._caps is not None:
            self._caps.kill_all()  # the server and anything inside the sandbox
        if self._proc is not None:
            stop_group(self._proc, 0, signal.SIGKILL)
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            self._proc = None
        if self._caps is not None:
            self._caps.remove()
            self._caps = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> WarmPytest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> str:
        """Start the sandboxed server; '' when it is ready, else why not."""
        limits = self.config.limits
        self._caps = make_caps(self.config)
        # --as-pid-1: the server itself is the namespace's init, so no other process
        # in the sandbox holds its pipes (pytest_server.py).
        argv = self.runner.argv(self.repo, read_only={str(SERVER_SCRIPT): _SERVER_IN_SANDBOX})
        argv += ["--as-pid-1", self.config.python, _SERVER_IN_SANDBOX, *(["--judge"] if self.judge else [])]
        # No CPU rlimit on the server, which lives for many runs; each run's child takes its own.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        self._proc = subprocess.Popen(
            capped_argv(argv, limits, self._caps, cpu_limit=False),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={"PATH": "/usr/bin:/bin"},
            start_new_session=True,
        )
        self.starts += 1
        ready = self._read_line(time.monotonic() + _START_TIMEOUT_S)
        if ready is not None and json.loads(ready).get("ready"):
            return ""
        self._stderr.seek(0)
        message = self._stderr.read().decode(errors="replace").strip()[-500:]
        self.close()
        return f"the warm pytest sandbox did not start: {message or 'no output'}"

    def _read_line(self, deadline: float) -> str | None:
        """One answer line from the server, or None on EOF or at the deadline."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        data = b""
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            data += chunk
        return data.decode()
