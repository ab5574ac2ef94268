"""Per-command cgroups capping memory and process count, on cgroup v2 or v1.

The process-count rlimit is ignored for root, and RLIMIT_AS breaks runtimes that
reserve address space, so the tree's memory and pids are capped here. Each command
gets its own group under `tandem-env/`:
- v2 (unified hierarchy, `cgroup.controllers` at the root, or at `<root>/unified`
  on hybrid hosts): one group with memory.max, memory.swap.max and pids.max, the
  parent's subtree_control enabling +memory +pids;
- v1: a group per controller, `memory/` (memory.limit_in_bytes) and `pids/`.
v2 is tried first, v1 second. `kill_all` sweeps the group after the run (belt and
braces beside bubblewrap's pid namespace). When neither can be written,
`CgroupCaps.create` returns None and `unavailable()` says what is missing: the
grading pool then refuses to start unless the user opted out (EnvConfig.use_cgroups).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass

DEFAULT_ROOT = "/sys/fs/cgroup"
_PARENT = "tandem-env"
_V2_CONTROLLERS = ("memory", "pids")


@dataclass
class CgroupCaps:
    dirs: list[str]  # v2: the one group; v1: one directory per controller (memory, pids)
    version: int

    @classmethod
    def create(cls, memory_mb: int, max_processes: int, root: str = DEFAULT_ROOT) -> CgroupCaps | None:
        """Fresh groups with the caps applied, or None when no hierarchy takes them."""
        return _create_v2(memory_mb, max_processes, root) or _create_v1(memory_mb, max_processes, root)

    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        return self.oom_events() > 0

    def oom_events(self) -> int:
        """OOM kills plus times the memory cap was hit, since the groups were made."""
        events = 0
        for d in self.dirs:
            if self.version == 2:
                counts = _keyed(os.path.join(d, "memory.events"))
                events += counts.get("oom_kill", 0) + counts.get("max", 0)
            else:
                events += _keyed(os.path.join(d, "memory.oom_control")).get("oom_kill", 0)
                events += _read_int(os.path.join(d, "memory.failcnt"))
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


def unavailable(root: str = DEFAULT_ROOT) -> str:
    """'' when memory and pids caps can be applied under `root`, else what is missing
    (tried by making and removing one group)."""
    caps = CgroupCaps.create(64, 16, root)
    if caps is not None:
        caps.remove()
        return ""
    v2 = v2_root(root)
    reasons = []
    if v2 is None:
        reasons.append(f"no cgroup v2 hierarchy at {root} or {root}/unified")
    else:
        have = _controllers(v2)
        missing = [c for c in _V2_CONTROLLERS if c not in have]
        reasons.append(
            f"cgroup v2 at {v2}: "
            + (
                f"controllers {missing} not available (cgroup.controllers: {' '.join(sorted(have)) or 'none'})"
                if missing
                else f"{v2}/{_PARENT} not writable or controllers not delegated"
            )
        )
    for controller in ("memory", "pids"):
        path = os.path.join(root, controller)
        if not os.path.isfile(os.path.join(path, "cgroup.procs")):
            reasons.append(f"no cgroup v1 {controller} hierarchy at {path}")
        elif not os.access(path, os.W_OK):
            reasons.append(f"cgroup v1 {path} not writable by uid {os.getuid()}")
    return "; ".join(reasons) or f"cgroups under {root} could not be created"


def v2_root(root: str = DEFAULT_ROOT) -> str | None:
    """The unified hierarchy: `root` itself (v2-only hosts) or `root/unified` (hybrid)."""
    for path in (root, os.path.join(root, "unified")):
        if os.path.isfile(os.path.join(path, "cgroup.controllers")):
            return path
    return None


def _create_v2(memory_mb: int, max_processes: int, root: str) -> CgroupCaps | None:
    base = v2_root(root)
    if base is None or not all(c in _controllers(base) for c in _V2_CONTROLLERS):
        return None
    parent = os.path.join(base, _PARENT)
    path = os.path.join(parent, uuid.uuid4().hex[:12])
    try:
        os.makedirs(parent, exist_ok=True)
        # Controllers reach a group only through every ancestor's subtree_control.
        enable = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
        for d in (base, parent):
            if not all(c in _words(os.path.join(d, "cgroup.subtree_control")) for c in _V2_CONTROLLERS):
                _write(os.path.join(d, "cgroup.subtree_control"), enable)
        os.mkdir(path)
    except OSError:
        return None
    try:
        _write(os.path.join(path, "memory.max"), str(memory_mb * 2**20))
        _write(os.path.join(path, "pids.max"), str(max_processes))
        _write_optional(os.path.join(path, "memory.swap.max"), "0")  # absent without swap accounting
        _write_optional(os.path.join(path, "memory.oom.group"), "1")  # an OOM kills the whole tree
    except OSError:
        _rmdir(path)
        return None
    return CgroupCaps([path], 2)


def _create_v1(memory_mb: int, max_processes: int, root: str) -> CgroupCaps | None:
    name = uuid.uuid4().hex[:12]
    made: list[str] = []
    if not all(os.path.isfile(os.path.join(root, c, "cgroup.procs")) for c in ("memory", "pids")):
        return None  # not mounted there: never create plain folders in its place
    try:
        for controller, settings in (
            ("memory", {"memory.limit_in_bytes": memory_mb * 2**20, "memory.swappiness": 0}),
            ("pids", {"pids.max": max_processes}),
        ):
            path = os.path.join(root, controller, _PARENT, name)
            os.makedirs(path)
            made.append(path)
            for key, value in settings.items():
                if key == "memory.swappiness":
                    _write_optional(os.path.join(path, key), str(value))
                else:
                    _write(os.path.join(path, key), str(value))
    except OSError:
        for path in made:
            _rmdir(path)
        return None
    return CgroupCaps(made, 1)


def _controllers(v2: str) -> set[str]:
    return _words(os.path.join(v2, "cgroup.controllers"))


def _words(path: str) -> set[str]:
    try:
        with open(path) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _keyed(path: str) -> dict[str, int]:
    """A flat-keyed cgroup file ('key value' per line)."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if value.strip().isdigit():
                    out[key] = int(value)
    except OSError:
        pass
    return out


def _read_int(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _write_optional(path: str, value: str) -> None:
    try:
        _write(path, value)
    except OSError:
        pass


def _rmdir(path: str) -> None:
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # EBUSY while the last killed processes are being reaped
