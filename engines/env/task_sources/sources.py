"""Where a project to build tasks from comes from: a pinned PyPI sdist, or a folder
on this machine (the user's own project, or a git checkout at the commit wanted).

    project_source("toolz")                        # a default pin
    project_source("glom==25.12.0:<sha256>")       # any pinned sdist
    project_source("/home/me/src/myproject")       # a local folder

Every source has a name, a version, a content hash (the tasks' base commits derive
from it, so a rebuild from the same code gives the same ids) and `materialise(dest)`,
which writes the project tree the corpus keeps as its snapshot.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from engines.env.errors import BuildError
from engines.env.task_sources.sdists import SdistPin
from engines.env.workspace import read_tree, tree_hash

_NOT_COPIED = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "*.pyc",
    "*.egg-info",
    "build",
    "dist",
    ".pytest_cache",
    ".mypy_cache",
)


@dataclass(frozen=True)
class LocalProject:
    path: Path
    name: str
    version: str
    sha256: str  # hash of the source tree (read_tree's files), not of an archive

    @property
    def spec(self) -> str:
        return str(self.path)

    @classmethod
    def at(cls, path: str | Path) -> LocalProject:
        root = Path(path).resolve()
        digest = tree_hash(read_tree(root))
        return cls(root, root.name, f"local-{digest[:8]}", digest)

    def materialise(self, dest: Path) -> Path:
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.path, dest, ignore=shutil.ignore_patterns(*_NOT_COPIED), symlinks=False)
        return dest


ProjectSource = SdistPin | LocalProject


def project_source(spec: str) -> ProjectSource:
    """A local folder when `spec` names one, else a pinned sdist (errors say how to write either)."""
    if os.sep in spec or spec.startswith("."):
        if not os.path.isdir(spec):
            raise BuildError(
                f"project {spec!r}: no such folder; give a project folder, a default pin name or 'name==version:sha256'"
            )
        return LocalProject.at(spec)
    return SdistPin.parse(spec)
