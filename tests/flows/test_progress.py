"""The terminal shows one line per step; Prefect's own INFO lines only with verbose,
and the step lines reach the run's log on the server (the UI) either way."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import httpx
import pytest

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import sys
    from flows.cli import app  # everything the tandem command loads before a run starts
    from tasks.progress import quiet_prefect_console
    quiet_prefect_console(verbose=sys.argv[1] == "verbose")
    from prefect import flow, task
    from tasks.progress import say

    @task
    def work(step: int) -> int:
        return step * 2

    @flow(name="progress-check", log_prints=True)
    def lane(tag: str) -> None:
        for step in range(3):
            work(step)
            say(f"[check] {tag} step {step + 1}/3")

    lane(sys.argv[2])
""")


def run_lane(prefect_server: dict[str, str], mode: str, tag: str) -> str:
    env = {**os.environ, **prefect_server}
    env.pop("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, tag], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_quiet_terminal_shows_only_the_step_lines(prefect_server: dict[str, str]) -> None:
    out = run_lane(prefect_server, "quiet", "q")
    # Warnings still show by design (a busy server makes Prefect warn at exit); INFO does not.
    lines = [line for line in out.splitlines() if line.strip() and "| WARNING |" not in line]
    assert lines == [f"[check] q step {i}/3" for i in (1, 2, 3)], out
    # The UI still has them: the run's log on the server holds every step line (newest
    # first: the session's server also holds every earlier test's logs).
    logs = httpx.post(
        f"{prefect_server['PREFECT_API_URL']}/logs/filter", json={"limit": 200, "sort": "TIMESTAMP_DESC"}, timeout=10
    ).json()
    messages = [entry["message"] for entry in logs]
    assert all(f"[check] q step {i}/3" in messages for i in (1, 2, 3)), messages


def test_verbose_terminal_adds_prefects_lines_and_shows_each_step_once(prefect_server: dict[str, str]) -> None:
    out = run_lane(prefect_server, "verbose", "v")
    assert "Finished in state Completed" in out
    for i in (1, 2, 3):
        assert out.count(f"[check] v step {i}/3") == 1, out
