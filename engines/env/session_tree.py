"""One episode's view of its task's tree: in memory until a tool needs a directory.

An episode mostly reads and edits a file or two (view, edit, change, test through a
grading pool, which takes the diff). Writing the whole base to a fresh directory
for every episode, and reading it back for every diff, was a tenth of the client's
CPU in a 128-episode feedback step. So the tree starts as the base in memory plus
the files the episode wrote, and is put on disk (a `Workspace`) only when a tool
runs a command in it (bash, or tests in a cold sandbox); from then on the disk is
the tree, since a command may change anything in it.
"""

from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path

from engines.env.workspace import Files, Workspace, unified_diff


class SessionTree:
    """The base tree (shared, never written) with this episode's writes on top."""

    def __init__(self, base: Files, scratch: Path) -> None:
        self.base = base
        self._scratch = scratch
        self._written: Files = {}
        self._disk: Workspace | None = None

    def locate(self, rel: str) -> str | None:
        """`rel` as a path relative to the tree's root, or None when it points outside
        (absolute, above the root, or through a link once on disk)."""
        if self._disk is not None:
            path = self._disk.resolve(rel)
            return None if path is None else str(path.relative_to(self._disk.root.resolve()))
        norm = posixpath.normpath(rel or ".")
        return None if norm.startswith(("/", "../")) or norm == ".." else norm

    def read_bytes(self, rel: str) -> bytes | None:
        """The file at `rel` (a path `locate` returned), or None when there is no such file."""
        if self._disk is not None:
            path = self._disk.root / rel
            return path.read_bytes() if path.is_file() else None
        return self._written.get(rel, self.base.get(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        if self._disk is not None:
            (self._disk.root / rel).write_bytes(data)
        else:
            self._written[rel] = data

    def changes(self) -> Files | None:
        """The files this episode changed, as they stand; None once the tree is on disk
        (a command may have done anything there: read it through `diff`)."""
        if self._disk is not None:
            return None
        return {rel: data for rel, data in self._written.items() if self.base.get(rel) != data}

    def diff(self) -> str:
        """The episode's changes as a git-style diff against the base."""
        return self._disk.diff() if self._disk is not None else unified_diff(self.base, self.base | self._written)

    @property
    def root(self) -> Path:
        """The tree's directory, written on first use."""
        if self._disk is None:
            self._scratch.mkdir(parents=True, exist_ok=True)
            self._disk = Workspace(Path(tempfile.mkdtemp(prefix="ws-", dir=self._scratch)), self.base)
            for rel, data in self._written.items():
                (self._disk.root / rel).write_bytes(data)
        return self._disk.root

    def destroy(self) -> None:
        if self._disk is not None:
            self._disk.destroy()
