"""A writable copy of a task's base tree: create, reset to base, diff against base.

The base of a task is its snapshot (a directory of the upstream tree, or files
inline in the task's metadata for micro tasks) with the task's `bug_patch`
applied. The base is held in memory as {relative path: bytes}; a reset rewrites
only the files that differ and deletes files that appeared, so one copy can be
reused for many episodes without carrying anything from one to the next.
The diff is taken by comparing the tree with the base, never from the agent.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from engines.env.errors import TaskError
from engines.env.types import Task

_IGNORED_DIRS = {"__pycache__", ".pytest_cache", ".git", ".hypothesis", ".tox", ".eggs"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")

Files = dict[str, bytes]
_PATCH_PATHS = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (?:a/)?(\S+)|\+\+\+ (?:b/)?(\S+))", re.M)
_base_cache: dict[tuple[str, str, str], Files] = {}
_cache_lock = threading.Lock()


def read_tree(root: Path) -> Files:
    """Every regular file under `root` that belongs to the source tree."""
    files: Files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files


def tree_hash(files: Files) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()[:16]


def base_files(task: Task) -> Files:
    """The task's base tree in memory (cached per snapshot and bug patch)."""
    meta = task.meta()
    key = (task.snapshot_uri, meta.get("bug_patch", ""), task.metadata if not task.snapshot_uri else "")
    with _cache_lock:
        cached = _base_cache.get(key)
    if cached is not None:
        return cached
    if task.snapshot_uri:
        root = Path(task.snapshot_uri.removeprefix("file://"))
        if not root.is_dir():
            raise TaskError(
                f"task {task.instance_id}: snapshot {task.snapshot_uri} is not a directory; rebuild or re-import the corpus"
            )
        files = read_tree(root)
    elif "files" in meta:
        files = {rel: text.encode() for rel, text in meta["files"].items()}
    else:
        raise TaskError(f"task {task.instance_id}: no snapshot_uri and no inline files in metadata; give one of them")
    if meta.get("bug_patch"):
        files = apply_to_files(files, meta["bug_patch"], what=f"task {task.instance_id}: bug_patch")
    with _cache_lock:
        if len(_base_cache) > 64:  # a real-repo base is about 1 MB
            _base_cache.clear()
        _base_cache[key] = files
    return files


def apply_to_files(files: Files, patch: str, what: str) -> Files:
    """Apply `patch` to an in-memory tree (through a temporary directory holding only the files it names)."""
    named = {p for m in _PATCH_PATHS.finditer(patch) for p in m.groups() if p and p != "/dev/null"}
    touched = {rel: data for rel, data in files.items() if rel in named}
    with tempfile.TemporaryDirectory(prefix="tandem-apply-") as tmp:
        write_tree(Path(tmp), touched)
        error = git_apply(Path(tmp), patch)
        if error:
            raise TaskError(f"{what} does not apply: {error}")
        after = read_tree(Path(tmp))
    return {rel: data for rel, data in files.items() if rel not in touched} | after


def write_tree(root: Path, files: Files) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def git_apply(root: Path, patch: str) -> str:
    """Apply a unified diff inside `root`; '' on success, else git's message.

    git refuses paths that leave the tree ('..', absolute, through symlinks).
    GIT_CEILING_DIRECTORIES stops git from finding an enclosing repository, which
    would make it apply paths relative to that repository instead.
    """
    if not patch.strip():
        return ""
    env = {"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(root.parent), "HOME": str(root)}
    for args in (["git", "apply", "--whitespace=nowarn"], ["git", "apply", "--whitespace=nowarn", "--recount", "-C1"]):
        # No timeout: git apply on bounded input ends, and a timeout makes Python poll
        # for the exit with sleeps of up to 50 ms (30 ms per grade measured).
        proc = subprocess.run(
            [*args, "-"], input=patch.encode("utf-8", "surrogateescape"), cwd=root, env=env, capture_output=True
        )
        if proc.returncode == 0:
            return ""
    return proc.stderr.decode(errors="replace").strip()[-500:] or "git apply failed"


def unified_diff(base: Files, current: Files) -> str:
    """git-style diff from `base` to `current` (text files; binary changes are skipped)."""
    chunks: list[str] = []
    for rel in sorted(set(base) | set(current)):
        old, new = base.get(rel), current.get(rel)
        if old == new:
            continue
        try:
            old_lines = (old or b"").decode().splitlines(keepends=True)
            new_lines = (new or b"").decode().splitlines(keepends=True)
        except UnicodeDecodeError:
            continue
        header = [f"diff --git a/{rel} b/{rel}\n"]
        if old is None:
            header.append("new file mode 100644\n")
        elif new is None:
            header.append("deleted file mode 100644\n")
        body = list(
            difflib.unified_diff(
                old_lines,
                new_lines,
                "/dev/null" if old is None else f"a/{rel}",
                "/dev/null" if new is None else f"b/{rel}",
                n=3,
            )
        )
        for i, line in enumerate(body):
            if not line.endswith("\n"):
                body[i] = line + "\n\\ No newline at end of file\n"
        if body:
            chunks.append("".join(header + body))
    return "".join(chunks)


class Workspace:
    """One writable copy of a base tree under `root` (a directory this object owns)."""

    def __init__(self, root: Path, base: Files):
        self.root, self.base = root, base
        self.kept: Files = {}  # files outside the source tree that reset() restores too (bytecode)
        root.mkdir(parents=True, exist_ok=True)
        self.reset()

    def keep_bytecode(self, python: str) -> None:
        """Compile the tree with `python` into hash-checked .pyc files and keep them
        across resets. The interpreter checks each against its source's hash, so a
        patched module is compiled afresh; reset() restores them byte for byte, so a
        run cannot leave bytecode behind for the next."""
        subprocess.run(
            [python, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash", str(self.root)],
            capture_output=True,
            check=False,
        )
        self.kept = {}
        for dirpath, _, filenames in os.walk(self.root):
            if os.path.basename(dirpath) == "__pycache__":
                for name in filenames:
                    path = os.path.join(dirpath, name)
                    with open(path, "rb") as f:
                        self.kept[os.path.relpath(path, self.root)] = f.read()

    @classmethod
    def for_task(cls, task: Task, parent: str | Path) -> Workspace:
        Path(parent).mkdir(parents=True, exist_ok=True)
        return cls(Path(tempfile.mkdtemp(prefix="ws-", dir=parent)), base_files(task))

    def reset(self) -> None:
        """Make the tree equal to the base again: rewrite changed files, delete new ones."""
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, self.root)
                if (rel not in self.base and rel not in self.kept) or os.path.islink(path):
                    os.unlink(path)
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    os.unlink(path)
                elif not os.listdir(path):
                    os.rmdir(path)
        for rel, data in (self.kept | self.base).items():
            path = self.root / rel
            try:
                if path.stat().st_size == len(data) and path.read_bytes() == data:
                    continue
            except (FileNotFoundError, NotADirectoryError):
                path.parent.mkdir(parents=True, exist_ok=True)
            except PermissionError:
                os.chmod(path, 0o644)
            path.write_bytes(data)
            os.chmod(path, 0o644)

    def diff(self) -> str:
        return unified_diff(self.base, read_tree(self.root))

    def write(self, files: Files) -> None:
        """Write `files` ({path: bytes}) over the tree (paths the caller has checked)."""
        write_tree(self.root, files)

    def apply(self, patch: str) -> str:
        return git_apply(self.root, patch)

    def changed_paths(self) -> list[str]:
        """Every path that differs from the base (and the kept bytecode): written, new,
        deleted, or turned into a symlink. Read from the tree itself, not from a patch,
        so it is what an applied patch really did."""
        expected = self.kept | self.base
        changed, seen = [], set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, self.root)
                seen.add(rel)
                data = expected.get(rel)
                if data is None or os.path.islink(path) or os.path.getsize(path) != len(data):
                    changed.append(rel)
                    continue
                with open(path, "rb") as f:
                    if f.read() != data:
                        changed.append(rel)
        return sorted(changed + [rel for rel in expected if rel not in seen])

    def resolve(self, rel: str) -> Path | None:
        """`rel` inside the tree, or None when it points outside (or through a link)."""
        path = (self.root / rel).resolve()
        return path if path == self.root.resolve() or self.root.resolve() in path.parents else None

    def destroy(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
