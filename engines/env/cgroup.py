"""Per-command cgroup v1 groups capping memory and process count.

The process-count rlimit is ignored for root, and RLIMIT_AS breaks runtimes that
reserve address space, so the tree's memory and pids are capped here. Each command
gets its own group under `<controller>/tandem-env/`; `kill_all` sweeps it after
the run (belt and braces beside bubblewrap's pid namespace). When the hierarchy is
not writable (unprivileged user, cgroup v2 only) `CgroupCaps.create` returns None
and only rlimits apply: the caller logs that once.
"""

from __future__ import annotations

import os
import signal
import uuid
from dataclasses import dataclass

_ROOT = "/sys/fs/cgroup"
_PARENT = "tandem-env"


@dataclass
class CgroupCaps:
    dirs: list[str]  # one directory per controller (memory, pids)

    @classmethod
    def create(cls, memory_mb: int, max_processes: int) -> "CgroupCaps | None":
        name = uuid.uuid4().hex[:12]
        made: list[str] = []
        try:
            for controller, settings in (
                ("memory", {"memory.limit_in_bytes": memory_mb * 2**20, "memory.swappiness": 0}),
                ("pids", {"pids.max": max_processes}),
            ):
                path = os.path.join(_ROOT, controller, _PARENT, name)
                os.makedirs(path)
                made.append(path)
                for key, value in settings.items():
                    _write_optional(os.path.join(path, key), str(value), required=key != "memory.swappiness")
        except OSError:
            for path in made:
                _rmdir(path)
            return None
        return cls(made)

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        return self.oom_events() > 0

    def oom_events(self) -> int:
        """OOM kills plus times the memory cap was hit, since the groups were made."""
        events = 0
        for d in self.dirs:
            try:
                with open(os.path.join(d, "memory.oom_control")) as f:
                    for line in f:
                        if line.startswith("oom_kill "):
                            events += int(line.split()[1])
                with open(os.path.join(d, "memory.failcnt")) as f:
                    events += int(f.read().strip() or 0)
            except (OSError, ValueError):
                continue
        return events

    def kill_all(self) -> None:
        """SIGKILL every process left in the groups (a few passes: forks race the sweep)."""
        for _ in range(20):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            _rmdir(d)

    def _pids(self) -> set[int]:
        pids: set[int] = set()
        for f in self.procs_files():
            try:
                with open(f) as fh:
                    pids.update(int(x) for x in fh.read().split())
            except OSError:
                continue
        return pids


def _write_optional(path: str, value: str, required: bool) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        if required:
            raise


def _rmdir(path: str) -> None:
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            # EBUSY while the last killed processes are being reaped.
            import time

            time.sleep(0.01)
