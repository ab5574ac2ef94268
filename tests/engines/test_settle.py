"""`settle`: every awaitable ends and its error is kept as a result, but a signal is never
swallowed: a SIGTERM that lands inside a settled awaitable of a Prefect flow ends the
process, as a SIGTERM landing anywhere else in the flow does."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect.exceptions import TerminationSignal

from engines.settle import settle

REPO = Path(__file__).resolve().parents[2]


async def _value(v: int) -> int:
    await asyncio.sleep(0)
    return v


async def _fail(exc: BaseException) -> None:
    await asyncio.sleep(0)
    raise exc


def test_results_and_errors_come_back_in_order() -> None:
    error = ValueError("no")
    assert asyncio.run(settle(_value(1), _fail(error), _value(3))) == [1, error, 3]


def test_a_childs_cancellation_stays_a_result() -> None:
    async def main() -> list:
        child = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_soon(child.cancel)
        return await settle(child, _value(2))

    cancelled, two = asyncio.run(main())
    assert isinstance(cancelled, asyncio.CancelledError) and two == 2


def test_an_interrupt_is_raised_once_every_awaitable_has_ended() -> None:
    ended: list[int] = []

    async def slow() -> None:
        await asyncio.sleep(0.05)
        ended.append(1)

    with pytest.raises(TerminationSignal):
        asyncio.run(settle(_fail(TerminationSignal(signal.SIGTERM)), slow()))
    assert ended == [1]


SCRIPT = """
import asyncio, sys, time
from prefect import flow
from engines.settle import settle

async def busy(seconds):
    print("[test] busy", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # no await: a signal lands in this coroutine
        sum(range(1000))

@flow
async def lane():
    for _ in range(60):
        await settle(busy(0.5), busy(0.5))
    print("[test] ran to its end", flush=True)

asyncio.run(lane())
"""


@pytest.mark.prefect
def test_a_sigterm_inside_settled_work_ends_the_flows_process(prefect_server: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT],
            cwd=REPO,
            env={**prefect_server, "PYTHONPATH": str(REPO)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "[test] busy" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)  # the loop alone would run on for about 60 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text(errors="replace")
    assert code == -signal.SIGTERM and "ran to its end" not in output, output[-3000:]


def test_no_project_code_gathers_with_return_exceptions_but_settle() -> None:
    """`asyncio.gather(..., return_exceptions=True)` swallows a signal (module docstring)."""
    users = [
        str(path.relative_to(REPO))
        for folder in ("engines", "flows", "tasks", "storage", "benchmarks", "scripts")
        for path in (REPO / folder).rglob("*.py")
        if "return_exceptions=True" in path.read_text()
    ]
    assert users == ["engines/settle.py"]
