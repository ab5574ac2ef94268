"""A project's declared dependencies, installed into an environment of its own.

Projects like glom or inflect need their own dependencies (face, attrs, boltons;
more_itertools, typeguard) before any of their tests can pass. They are read from
the project's metadata (pyproject.toml's [project] table, setup.cfg, or, failing
both, the metadata pip builds), together with a test extra if the project has one,
and installed with `pip install --target` into

    <cache>/deps/<key>/          key = sha256 of the sorted requirements + Python version

staged beside it and committed whole (storage/atomic_dir.py), so a folder that exists is complete and
is shared by every project with the same requirements. A task's test command puts its
folder on PYTHONPATH through `$TANDEM_DEPS`, which the sandbox sets; the sandbox binds
read-only, under SANDBOX_DEPS, only the folders that command names (`command_deps`;
runner.py), in its test runs and in its episode's bash alike (the unsandboxed backend
points `$TANDEM_DEPS` at the whole host folder). The project itself is never
installed: its tests must import the copy under test.

Owns reading requirements and materialising their folder; not resolving conflicts
with the sandbox interpreter's own packages (the folder comes first on sys.path).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement

from engines.env.errors import BuildError
from storage.atomic_dir import commit_dir, stage_dir

if TYPE_CHECKING:
    from engines.env.types import Task

SANDBOX_DEPS = "/opt/tandem/deps"
DEPS_VAR = "TANDEM_DEPS"
_TEST_EXTRAS = ("test", "tests", "testing")
# Never installed beside a project: the sandbox interpreter already runs pytest, and a
# second copy from a project's test extra would shadow the one grading expects.
_PROVIDED = {"pytest"}


def deps_root() -> Path:
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem-rl")) / "deps"


def declared_requirements(root: Path, python: str = sys.executable) -> list[str]:
    """Requirements of the project at `root` (runtime plus a test extra), sorted, no duplicates."""
    raw = _from_pyproject(root)
    if raw is None:
        raw = _from_setup_cfg(root)
    if raw is None:  # setup.py or dynamic dependencies: only the build backend knows them
        packaged = (root / "setup.py").is_file() or (root / "pyproject.toml").is_file()
        raw = _from_built_metadata(root, python) if packaged else []
    kept = set()
    for text in raw:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise BuildError(f"{root.name}: cannot read requirement {text!r} ({exc})") from None
        if req.name.lower() in _PROVIDED:
            continue
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *_TEST_EXTRAS)):
            req.marker = None  # evaluated here, for this interpreter
            kept.add(str(req))
    return sorted(kept)


def deps_key(requirements: list[str], python: str = sys.executable) -> str:
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return hashlib.sha256(json.dumps([sorted(requirements), version]).encode()).hexdigest()[:16]


def ensure_deps(requirements: list[str], python: str = sys.executable, root: Path | None = None) -> str | None:
    """The key of a folder holding `requirements` for `python` (installed once); None when empty."""
    if not requirements:
        return None
    root = root or deps_root()
    key = deps_key(requirements, python)
    dest = root / key
    if dest.is_dir():
        return key
    tmp = stage_dir(dest)
    cmd = _pip_install(python, "--no-input", "--target", str(tmp), *requirements)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"installing {requirements} failed: {proc.stderr.strip()[-400:]}")
    os.chmod(tmp, 0o755)  # readable by a sandbox running as another user
    commit_dir(tmp, dest, replace=False)  # another build committed the same key meanwhile: keep theirs
    return key


def ensure_task_deps(tasks: list[Task], python: str = sys.executable) -> int:
    """Install the dependency folders a corpus's tasks name (a corpus built elsewhere);
    returns how many distinct folders the tasks use."""
    wanted = {tuple(reqs) for t in tasks if (reqs := t.meta().get("requirements"))}
    for reqs in wanted:
        ensure_deps(list(reqs), python)
    return len(wanted)


def command_deps(command: str) -> tuple[str, ...]:
    """The dependency folders a (test) command names through `$TANDEM_DEPS/<key>`: the
    only ones the sandbox shows it, so no episode reads another project's folder (a
    dependency of one project can be another task's project)."""
    return tuple(dict.fromkeys(re.findall(rf"\${DEPS_VAR}/([0-9a-f]{{16}})\b", command)))


def pythonpath_entry(key: str) -> str:
    """What a test command puts on PYTHONPATH for the folder `key` (expanded by the shell)."""
    return f"${DEPS_VAR}/{key}"


def _from_pyproject(root: Path) -> list[str] | None:
    path = root / "pyproject.toml"
    if not path.is_file():
        return None
    project = tomllib.loads(path.read_text()).get("project")
    if not project or "dependencies" in project.get("dynamic", []):
        return None
    extras = project.get("optional-dependencies", {})
    return list(project.get("dependencies", [])) + [r for e in _TEST_EXTRAS for r in extras.get(e, [])]


def _from_setup_cfg(root: Path) -> list[str] | None:
    path = root / "setup.cfg"
    cfg = configparser.ConfigParser()
    if not path.is_file() or not cfg.read(path) or not cfg.has_option("options", "install_requires"):
        return None
    lines = cfg.get("options", "install_requires").splitlines()
    for extra in _TEST_EXTRAS:
        if cfg.has_option("options.extras_require", extra):
            lines += cfg.get("options.extras_require", extra).splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _pip_install(python: str, *args: str) -> list[str]:
    """`pip install ARGS` of `python`, quiet and without pip's own version check (errors
    still reach stderr, which callers quote)."""
    return [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]


def _from_built_metadata(root: Path, python: str) -> list[str]:
    """Requires-Dist from the metadata pip builds (setup.py projects, dynamic dependencies)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = _pip_install(python, "--dry-run", "--no-deps", "--ignore-installed", "--report", str(report), str(root))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not report.is_file():
            raise BuildError(f"{root.name}: cannot read its declared dependencies ({proc.stderr.strip()[-300:]})")
        items = json.loads(report.read_text()).get("install", [])
    return list(items[0]["metadata"].get("requires_dist", [])) if items else []
