"""Memory and process caps on cgroup v2 or v1, and a grading pool that refuses to
start when neither can be applied, unless the user opted out."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.env.config import EnvConfig, SandboxLimits
from engines.env.errors import SandboxUnavailableError
from engines.env.grader import GradingPool
from engines.env.sandbox.cgroup import DEFAULT_ROOT, CgroupCaps, unavailable, v2_root
from engines.env.sandbox.runner import make_runner


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_the_caps_hold_on_this_hosts_cgroup_version(tmp_path: Path) -> None:
    """A fork bomb and a memory hog in the real sandbox, on whichever version the host has."""
    limits = SandboxLimits(memory_mb=64, max_processes=16, cpu_seconds=5, wall_timeout_s=15)
    runner = make_runner(EnvConfig(limits=limits, scratch_dir=str(tmp_path)))
    forks = runner.run(
        "python3 -c \"import os\nn=0\ntry:\n  for _ in range(200):\n    if os.fork()==0:\n      import time; time.sleep(3); os._exit(0)\n    n+=1\nexcept OSError: pass\nprint('forked', n)\"",
        tmp_path,
    )
    assert "forked" in forks.output, forks.output
    assert int(forks.output.split("forked")[1].split()[0]) < 16, forks.output  # pids.max held
    hog = runner.run("python3 -c \"x = bytearray(512 * 2**20); print('allocated')\"", tmp_path)
    assert "allocated" not in hog.output and hog.oom, hog


def _fake_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_v2_groups_are_laid_out_with_memory_max_and_pids_max(tmp_path: Path) -> None:
    """The files a v2 group is made of, on a plain directory shaped like a cgroup2 root
    (this host's v2 hierarchy lends no memory or pids controller to check the kernel's side)."""
    root = _fake_tree(tmp_path, {"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "cpu\n"})
    caps = CgroupCaps.create(256, 32, str(root))
    assert caps is not None and caps.version == 2 and len(caps.dirs) == 1
    group = Path(caps.dirs[0])
    assert group.parent == root / "tandem-env"
    assert (group / "memory.max").read_text() == str(256 * 2**20)
    assert (group / "pids.max").read_text() == "32"
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert caps.procs_files() == [str(group / "cgroup.procs")]
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert caps.oom_events() == 4


def test_a_v2_root_without_memory_and_pids_falls_back_to_v1_or_says_so(tmp_path: Path) -> None:
    root = _fake_tree(tmp_path, {"unified/cgroup.controllers": "hugetlb\n"})  # this host's hybrid layout
    assert v2_root(str(root)) == str(root / "unified")
    assert CgroupCaps.create(64, 16, str(root)) is None
    missing = unavailable(str(root))
    assert "controllers ['memory', 'pids'] not available" in missing and "no cgroup v1 memory hierarchy" in missing


def test_grading_refuses_to_start_without_caps_unless_opted_out(tmp_path: Path) -> None:
    config = EnvConfig(cgroup_root=str(tmp_path / "nothing"), scratch_dir=str(tmp_path / "scratch"), backend="bwrap")
    with pytest.raises(SandboxUnavailableError, match=r"no cgroup v2 hierarchy.*env\.use_cgroups=false"):
        GradingPool(config, workers=1)


@pytest.mark.sandbox
def test_grading_starts_without_caps_when_opted_out(tmp_path: Path) -> None:
    config = EnvConfig(
        cgroup_root=str(tmp_path / "nothing"), scratch_dir=str(tmp_path / "scratch"), backend="bwrap", use_cgroups=False
    )
    GradingPool(config, workers=1).close()


def test_the_host_root_is_the_default() -> None:
    assert EnvConfig().cgroup_root == DEFAULT_ROOT
