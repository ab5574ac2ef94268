"""The interpreter graded tests run with inside the sandbox, and what of it the sandbox shows.

scripts/setup.sh builds an environment holding pytest and nothing else
(requirements/sandbox.txt) and exports its interpreter as TANDEM_SANDBOX_PYTHON, the
default of `env.python`. The sandbox binds that environment's prefix and its base
interpreter's (the standard library). Package folders the interpreter does not import
from are shown as empty read-only folders: the base interpreter's own site-packages
(a virtual environment never reads it) and the system Python's (/usr/lib/python3/
dist-packages and the like). So neither `import` nor `bash` in an episode finds an
installed copy of a task's project there. A task's own dependencies come from its
folder under deps.py. Not hidden: copies other software vendors inside system folders
(a cloud SDK's third_party/ under /usr/lib).

Falling back to the orchestrator's interpreter (no TANDEM_SANDBOX_PYTHON) still works,
with a warning: its hundreds of packages are then visible to the code under test.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SANDBOX_PYTHON_ENV = "TANDEM_SANDBOX_PYTHON"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/alternatives")
# The system Python's package folders (Debian's python3-* packages, pip as root).
_SYSTEM_PACKAGE_GLOBS = ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages")
_fallback_warned = False

# Run by the interpreter itself: what it imports from, and the packages it holds.
_PROBE = """
import importlib.metadata as md, json, sys, sysconfig
base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
print(json.dumps({
    "path": sys.path,
    "base_site": sorted({base["purelib"], base["platlib"]}),
    "packages": sorted(f"{d.metadata['Name']}=={d.version}" for d in md.distributions()),
}))
"""


@dataclass(frozen=True)
class PythonLayout:
    binds: tuple[str, ...]  # installation prefixes to bind read-only
    hidden: tuple[str, ...]  # folders inside them the interpreter does not import from: shown empty
    packages: tuple[str, ...]  # "name==version" of every distribution it can import


def default_sandbox_python() -> str:
    """TANDEM_SANDBOX_PYTHON when set up, else (with a warning, once) this interpreter."""
    global _fallback_warned
    if path := os.environ.get(SANDBOX_PYTHON_ENV):
        return path
    if not _fallback_warned:
        _fallback_warned = True
        log.warning(
            "%s is not set: sandboxed tests run with the orchestrator's interpreter, whose packages the code "
            "under test can import and read. Source scripts/setup.sh (it builds a pytest-only environment) "
            "or set env.python.",
            SANDBOX_PYTHON_ENV,
        )
    return sys.executable


def check_python(python: str) -> str:
    """`python` if it is an executable file, else a clear error naming the field."""
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise ValueError(
            f"env.python={python!r} is not an executable interpreter: rerun scripts/setup.sh (it builds the "
            f"sandbox environment and exports {SANDBOX_PYTHON_ENV}) or point env.python at a python with pytest"
        )
    return python


@functools.lru_cache(maxsize=8)
def python_layout(python: str) -> PythonLayout:
    """What the sandbox binds and hides for `python` (asked of the interpreter once)."""
    probe = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    facts = json.loads(probe.stdout)
    binds = _prefixes(python)
    imported = {os.path.realpath(p) for p in facts["path"]}
    candidates = [*facts["base_site"], *(d for pattern in _SYSTEM_PACKAGE_GLOBS for d in sorted(glob.glob(pattern)))]
    hidden = [
        d
        for d in dict.fromkeys(candidates)
        if os.path.isdir(d)
        and os.path.realpath(d) not in imported
        and any(d.startswith(b + "/") for b in (*binds, *SYSTEM_DIRS))
    ]
    return PythonLayout(tuple(binds), tuple(hidden), tuple(facts["packages"]))


def _prefixes(python: str) -> list[str]:
    """Installation prefixes of `python` and of every interpreter its symlinks lead to."""
    dirs, path = [], Path(python)
    for candidate in (path, path.resolve()):
        prefix = str(candidate.parent.parent)
        if prefix not in ("/", "/usr") and not any(prefix.startswith(d + "/") or prefix == d for d in SYSTEM_DIRS):
            dirs.append(prefix)
    return sorted(set(dirs))
