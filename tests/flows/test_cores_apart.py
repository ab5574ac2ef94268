"""The rollout side kept off the trainer's cores (flows/cores_apart.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from flows.cores_apart import cores_apart

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")


def test_threads_and_processes_started_inside_avoid_the_trainers_cores_until_it_ends() -> None:
    trainer = [CORES[-1]]
    seen: dict[str, set[int]] = {}
    waiting = threading.Event()
    older = threading.Thread(target=waiting.wait)  # a thread from before: it moves too
    older.start()
    try:
        with cores_apart(trainer):
            seen["main"] = os.sched_getaffinity(0)
            seen["older"] = os.sched_getaffinity(older.native_id)
            t = threading.Thread(target=lambda: seen.update(new=os.sched_getaffinity(0)))
            t.start()
            t.join()
            child = subprocess.run(
                [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                capture_output=True,
                text=True,
                check=True,
            )
        after = [os.sched_getaffinity(0), os.sched_getaffinity(older.native_id)]
    finally:
        waiting.set()
        older.join()
    others = set(CORES) - set(trainer)
    assert seen == {"main": others, "older": others, "new": others}
    assert child.stdout.strip() == str(sorted(others))
    assert after == [set(CORES), set(CORES)]  # every thread has its cores back


def test_nothing_moves_when_no_core_would_be_left() -> None:
    with cores_apart(CORES):
        assert os.sched_getaffinity(0) == set(CORES)
