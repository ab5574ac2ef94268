"""The measured module seconds that order the suite (tests/module_seconds.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import module_seconds

REPO = Path(__file__).resolve().parents[1]


def test_durations_lines_sum_by_module() -> None:
    lines = [
        "12.50s call     tests/flows/test_a.py::test_one[x-y]",
        "2.00s setup    tests/flows/test_a.py::test_two",
        "0.50s teardown tests/storage/test_b.py::test_three",
        "(1834 durations < 0.005s hidden.  Use -vv to show these durations.)",
        "FAILED tests/flows/test_a.py::test_one - 3.0s",
    ]
    assert module_seconds.from_durations(lines) == {"tests/flows/test_a.py": 14.5, "tests/storage/test_b.py": 0.5}


def test_every_measured_module_exists() -> None:
    seconds = module_seconds.measured()
    assert seconds, f"{module_seconds.FILE} is missing or empty"
    assert [m for m in seconds if not (REPO / m).is_file()] == []


def test_items_sort_by_their_modules_seconds_keeping_each_modules_order() -> None:
    measured = module_seconds.measured()
    big, small = max(measured, key=measured.get), min(measured, key=measured.get)
    items = [SimpleNamespace(nodeid=n) for n in (f"{small}::a", f"{big}::b", "tests/new.py::c", f"{big}::d")]
    module_seconds.costliest_first(items, slow=lambda item: item.nodeid.endswith("::c"))
    assert [i.nodeid.rsplit("::")[-1] for i in items] == ["b", "d", "c", "a"]
