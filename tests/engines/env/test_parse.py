"""Every AST the environment builds goes through one lock (engines/env/parse.py)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engines.env.task_sources.micro import MODULE, generate_micro_tasks, named_function, plausible_edits

ENGINES = Path(__file__).resolve().parents[3] / "engines"


def test_no_engine_module_parses_outside_the_lock() -> None:
    direct = [
        str(path.relative_to(ENGINES))
        for path in ENGINES.rglob("*.py")
        if path.name != "parse.py" and re.search(r"\bast\.parse\(", path.read_text())
    ]
    assert direct == []


def test_threads_that_parse_at_once_get_what_one_thread_gets() -> None:
    tasks = generate_micro_tasks(40, seed=3)

    def candidates(task) -> list:
        return plausible_edits(task.meta()["files"][MODULE], named_function(task))

    serial = [candidates(t) for t in tasks]
    with ThreadPoolExecutor(8) as threads:
        for _ in range(5):
            assert list(threads.map(candidates, tasks)) == serial
