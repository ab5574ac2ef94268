"""Each test module's measured seconds, so the test processes start on the costliest.

pytest-xdist (--dist loadscope) hands out whole modules in collection order; a long
module handed out last runs alone at the end. `tests/assets/module_seconds.json` holds
each module's seconds from a full run; the suite sorts modules by it, longest first.
Refresh it from a full run's `--durations=0` output:

    bash scripts/test.sh --durations=0 | tee suite.log
    python -m tests.module_seconds suite.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE = Path(__file__).parent / "assets" / "module_seconds.json"
DURATION = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(tests/\S+?\.py)::")


def measured() -> dict[str, float]:
    """Seconds by module path (tests/...py); empty when the file is missing."""
    return json.loads(FILE.read_text()) if FILE.exists() else {}


def from_durations(lines: list[str]) -> dict[str, float]:
    """Seconds by module from pytest's `--durations=0` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in lines:
        if match := DURATION.match(line):
            seconds[match[2]] += float(match[1])
    return {module: round(s, 1) for module, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def costliest_first(items: list[Any], slow: Callable[[Any], bool]) -> None:
    """Sort pytest items (in place, stably) by their module's measured seconds, longest
    first; a module not measured yet counts a minute when `slow(item)`, else nothing."""
    seconds = measured()
    for item in items:
        seconds.setdefault(item.nodeid.split("::")[0], 60.0 if slow(item) else 0.0)
    items.sort(key=lambda item: -seconds[item.nodeid.split("::")[0]])


def main(log: str) -> None:
    seconds = from_durations(Path(log).read_text(errors="replace").splitlines())
    if not seconds:
        sys.exit(f"{log}: no duration lines; run the suite with --durations=0")
    FILE.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{len(seconds)} modules, {sum(seconds.values()):.0f} s in all -> {FILE}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.module_seconds SUITE_LOG")
    main(sys.argv[1])
