"""What the host must provide for a marker's tests, and how to get it (a pytest
plugin, loaded by tests/conftest.py).

A selected test whose marker names a missing requirement fails the whole run before
any test starts: a machine without bubblewrap must not pass the sandbox battery by
skipping it. Leaving such tests out is explicit: deselect them, e.g.
`pytest -m "not sandbox"`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable

import pytest


def missing_bwrap() -> str:
    if shutil.which("bwrap"):
        return ""
    return (
        "bubblewrap (bwrap) is not on PATH: `source scripts/setup.sh` installs it when run as root "
        "(or `sudo apt-get install bubblewrap`)"
    )


def missing_cgroup_caps() -> str:
    from engines.env.sandbox.cgroup import unavailable

    reason = unavailable()
    if not reason:
        return ""
    return (
        f"no cgroup memory and pids caps on this host ({reason}): run as root on a host whose cgroup v2 "
        "hierarchy delegates the memory and pids controllers, or with cgroup v1 memory and pids hierarchies"
    )


def missing_tmpfs_mount() -> str:
    with tempfile.TemporaryDirectory() as mount:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount], capture_output=True)
        if done.returncode == 0:
            subprocess.run(["umount", mount], check=False)
            return ""
    return f"cannot mount a tmpfs ({done.stderr.decode().strip()}): run the suite as root with CAP_SYS_ADMIN"


# marker -> check ('' when the host has what the marker's tests need)
REQUIREMENTS: dict[str, Callable[[], str]] = {
    "sandbox": missing_bwrap,
    "cgroup": missing_cgroup_caps,
    "tmpfs": missing_tmpfs_mount,
}


def unmet(markers_selected: dict[str, int]) -> list[str]:
    """One line per marker in `markers_selected` (marker -> number of selected tests)
    whose requirement is missing, saying how to get it or leave those tests out."""
    lines = []
    for marker, count in markers_selected.items():
        reason = REQUIREMENTS[marker]()
        if reason:
            lines.append(
                f"{count} selected test(s) marked {marker!r} cannot run: {reason}; or deselect them with -m 'not {marker}'"
            )
    return lines


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A selected test that needs what the host lacks fails the run instead of skipping."""
    counts = {m: sum(1 for item in items if item.get_closest_marker(m)) for m in REQUIREMENTS}
    lines = unmet({m: n for m, n in counts.items() if n})
    if lines:
        raise pytest.UsageError("\n".join(lines))
