"""The security battery: each attack is contained, graded as a failure, the grader keeps
serving and the host is unchanged.

Attacks that would turn into a *pass* if containment failed are built that way on
purpose (the fixed module is only reachable through the forbidden channel), so a
hole shows up as a resolved grade, not only as a side effect.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from pathlib import Path

import pytest

from engines.env.config import EnvConfig
from engines.env.errors import SandboxUnavailableError
from engines.env.grader import GradingPool
from engines.env.sandbox.cgroup import CgroupCaps
from engines.env.sandbox.runner import make_runner
from engines.env.types import Task
from engines.env.workspace import apply_to_files, base_files, unified_diff

pytestmark = [pytest.mark.sandbox]


def _module_patch(task: Task, attack: str) -> str:
    """The buggy module with `attack` appended: code that runs when the tests import it.

    Appended, so definitions the attack obtains (the fixed module) replace the buggy ones.
    """
    base = base_files(task)
    return unified_diff(base, base | {"m.py": base["m.py"] + b"\n" + attack.encode() + b"\n"})


def _fixed_source(task: Task) -> str:
    return apply_to_files(base_files(task), task.patch, "gold")["m.py"].decode()


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    (tmp_path / "sentinel.txt").write_text("unchanged")
    return tmp_path


@pytest.fixture
def fix_server(micro_tasks):
    """A host TCP server that hands out the fixed module: reachable only if the network leaks."""
    task = micro_tasks[3]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connections = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            connections.append(conn)
            conn.sendall(_fixed_source(task).encode())
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield task, server.getsockname()[1], connections
    server.close()


@pytest.fixture
def made_cgroups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cgroup directories this test's own sandboxes make, recorded as they are made.

    Counting every group under `tandem-env/` instead would also see those of a sandbox in
    the other test process, alive for as long as its test holds a warm sandbox."""
    made: list[str] = []
    create = CgroupCaps.create

    def recorded(*args, **kwargs) -> CgroupCaps | None:
        caps = create(*args, **kwargs)
        made.extend(caps.dirs if caps else [])
        return caps

    monkeypatch.setattr(CgroupCaps, "create", recorded)
    return made


@pytest.mark.slow
@pytest.mark.parametrize("warm", [True, False], ids=["warm-sandbox", "cold-sandbox"])
def test_attacks_are_contained_and_graded_as_failures(
    micro_tasks, env_config, host_dir, fix_server, made_cgroups, warm
):
    env_config = env_config.model_copy(update={"warm_pytest": warm})
    net_task, port, connections = fix_server
    (host_dir / "fixed_module.py").write_text(_fixed_source(micro_tasks[4]))
    t = micro_tasks
    conftest_hack = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    rep = outcome.get_result()\n    rep.outcome = 'passed'\n"
    )
    base5 = base_files(t[5])
    attacks = {
        "network": (
            net_task,
            _module_patch(
                net_task,
                f"import socket\nexec(socket.create_connection(('127.0.0.1', {port}), timeout=2).makefile().read())",
            ),
        ),
        "read_outside": (t[4], _module_patch(t[4], f"exec(open({str(host_dir / 'fixed_module.py')!r}).read())")),
        "write_outside": (
            t[5],
            _module_patch(
                t[5],
                f"for p in [{str(host_dir / 'sentinel.txt')!r}, {str(host_dir / 'new.txt')!r}, '/usr/pwned', '/pwned']:\n"
                "    try:\n        open(p, 'w').write('pwned')\n    except OSError:\n        pass",
            ),
        ),
        "fork_bomb": (
            t[6],
            _module_patch(
                t[6], "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
            ),
        ),
        "memory_bomb": (
            t[7],
            _module_patch(t[7], "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))"),
        ),
        "busy_loop": (t[8], _module_patch(t[8], "while True:\n    pass")),
        "sleep_past_timeout": (t[9], _module_patch(t[9], "import time\ntime.sleep(60)")),
        "kill_parent": (
            t[10],
            _module_patch(
                t[10], "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)"
            ),
        ),
        "huge_output": (
            t[11],
            _module_patch(t[11], "import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 100000 + '\\n')"),
        ),
        "conftest_rewrites_failures": (
            t[12],
            unified_diff(base_files(t[12]), base_files(t[12]) | {"conftest.py": conftest_hack.encode()}),
        ),
        "delete_tests": (t[5], unified_diff(base5, {k: v for k, v in base5.items() if k != "test_m.py"})),
        "edit_tests": (t[5], unified_diff(base5, base5 | {"test_m.py": b"def test_nothing():\n    assert True\n"})),
    }
    with GradingPool(env_config) as pool:
        results = dict(zip(attacks, pool.grade_many(list(attacks.values()))))
        # still serving after the battery
        after = pool.grade_many([(task, task.patch) for task in t[3:13]])
    for name, result in results.items():
        assert not result.resolved and result.reward == 0.0, (name, result)
        assert not result.infra_failure, (name, result)
        assert result.grading_s < 20, (name, result.grading_s)
    assert all(r.resolved for r in after)
    assert connections == []
    assert (host_dir / "sentinel.txt").read_text() == "unchanged"
    assert not (host_dir / "new.txt").exists() and not Path("/usr/pwned").exists() and not Path("/pwned").exists()
    assert "conftest.py" in results["conftest_rewrites_failures"].notes
    assert "test_m.py" in results["edit_tests"].notes
    assert "timed out" in results["sleep_past_timeout"].notes
    # The pool removed every cgroup it made.
    assert made_cgroups, "the sandboxes ran without cgroups"
    assert [d for d in made_cgroups if os.path.isdir(d)] == []


def test_a_run_leaves_nothing_behind_for_the_next_run_in_a_warm_sandbox(micro_tasks, env_config):
    """Attacks on the sandbox that outlives a run: a daemon that writes the next task's
    fix into the shared copy, a file planted in /tmp for the next run to import, an
    answer forged into the server's channel. The next task (empty patch) must fail."""
    victim = micro_tasks[14]
    fixed = _fixed_source(victim)
    forged = json.dumps(
        {
            "exit_code": 0,
            "truncated": False,
            "timed_out": False,
            "output": "\n".join(f"PASSED {t}" for t in (*victim.FAIL_TO_PASS, *victim.PASS_TO_PASS)),
        }
    )
    attacks = {
        "daemon": _module_patch(
            micro_tasks[15],
            (
                "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                f"        for _ in range(400):\n            time.sleep(0.02)\n"
                f"            try:\n                open('/repo/m.py', 'w').write({fixed!r})\n            except OSError:\n                pass\n"
                "        os._exit(0)\n    os._exit(0)"
            ),
        ),
        "tmp_plant": _module_patch(
            micro_tasks[16], f"open('/tmp/m.py', 'w').write({fixed!r})\nopen('/tmp/conftest.py', 'w').write('')"
        ),
        "forge_answer": _module_patch(
            micro_tasks[17],
            (
                "import os\nfor fd in range(64):\n    for path in (f'/proc/{os.getppid()}/fd/{fd}', f'/proc/1/fd/{fd}'):\n"
                f"        try:\n            f = open(path, 'w'); f.write({forged!r} + '\\n'); f.close()\n        except OSError:\n            pass"
            ),
        ),
    }
    config = env_config.model_copy(update={"warm_pytest": True})
    with GradingPool(config, workers=1) as pool:  # one worker: every run shares the copy and the sandbox
        for name, patch in attacks.items():
            attacker = micro_tasks[15 + list(attacks).index(name)]
            result = pool.grade_one(attacker, patch)
            assert not result.resolved, (name, result)
            next_run = pool.grade_one(victim, "")
            assert not next_run.resolved and not next_run.infra_failure, (name, next_run)
        assert pool.grade_one(victim, victim.patch).resolved  # still serving


def test_sandbox_sees_only_the_repository_loopback_and_a_clean_environment(env_config, tmp_path):
    os.environ["TANDEM_TEST_SECRET"] = "s3cret"
    try:
        run = make_runner(env_config).run(
            "echo env:$TANDEM_TEST_SECRET; tail -n +3 /proc/net/dev | cut -d: -f1; ls /proc | grep -c '^[0-9]'; "
            "touch /repo/ok && echo repo-writable; touch /usr/x 2>/dev/null || echo usr-readonly; "
            "ls /root/.ssh 2>/dev/null | wc -l; id -u",
            tmp_path,
        )
    finally:
        del os.environ["TANDEM_TEST_SECRET"]
    lines = run.output.split()
    assert run.exit_code == 0 and "env:" in lines and "s3cret" not in run.output
    assert "lo" in lines and "eth0" not in lines
    assert "repo-writable" in lines and "usr-readonly" in lines and (tmp_path / "ok").exists()


def test_huge_output_is_truncated(env_config, tmp_path):
    run = make_runner(env_config).run("head -c 50000000 /dev/zero | tr '\\0' x; echo END", tmp_path)
    assert run.truncated and len(run.output) < 2 * env_config.limits.output_bytes and run.output.endswith("END\n")


def test_missing_bubblewrap_gives_install_instructions():
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        make_runner(EnvConfig(bwrap_path="/nonexistent/bwrap"))


def test_unsandboxed_backend_needs_opt_in_and_warns_every_run(tmp_path, caplog):
    with pytest.raises(ValueError, match="allow_unsandboxed"):
        EnvConfig(backend="unsandboxed")
    runner = make_runner(EnvConfig(backend="unsandboxed", allow_unsandboxed=True))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert runner.run("echo hi", tmp_path).output.strip() == "hi"
    assert sum("WITHOUT a sandbox" in r.message for r in caplog.records) == 2
