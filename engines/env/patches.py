"""Which parts of a model's patch the grader accepts.

A patch may change the project's source, nothing that decides how tests run or
what they check: test files, conftest.py, pytest/tox/setup/pyproject
configuration, import hooks (.pth, sitecustomize) and binary blobs are dropped,
so the known reward hacks (a conftest that rewrites failures to passes, deleting
or editing tests) never reach the test run. Dropped files are reported, not
silently lost.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_DENIED_NAMES = {
    "conftest.py", "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "pytest.ini", "noxfile.py",
    ".coveragerc", "manifest.in", "sitecustomize.py", "usercustomize.py", "__init__.pyi",
}
_TEST_DIRS = {"test", "tests", "testing"}
_FILE_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


@dataclass(frozen=True)
class FilteredPatch:
    text: str  # the accepted part, in git diff format
    dropped: tuple[str, ...]  # paths removed by the allowlist
    error: str = ""  # set when the patch cannot be read at all


def is_allowed(path: str, test_files: frozenset[str] = frozenset()) -> bool:
    """True for source files a fix may touch; False for tests and test/build configuration."""
    norm = posixpath.normpath(path)
    if norm.startswith(("/", "../")) or norm == ".." or norm in test_files:
        return False
    parts = norm.split("/")
    name = parts[-1].lower()
    if name in _DENIED_NAMES or name.endswith((".pth", ".cfg", ".ini", ".toml")):
        return False
    if name.startswith("test_") or name.endswith("_test.py") or name == "tests.py":
        return False
    return not any(p.lower() in _TEST_DIRS for p in parts[:-1])


def filter_patch(patch: str, test_files: frozenset[str] = frozenset()) -> FilteredPatch:
    """Split `patch` into per-file sections and keep the allowed ones."""
    if "\0" in patch:
        return FilteredPatch("", (), "patch contains NUL bytes (binary junk); send a text unified diff")
    if not patch.strip():
        return FilteredPatch("", ())
    sections = _split_files(patch)
    if sections is None:
        return FilteredPatch("", (), "patch is not a git-style unified diff (no 'diff --git a/... b/...' headers)")
    kept, dropped = [], []
    for old, new, text in sections:
        binary = "GIT binary patch" in text or "Binary files " in text
        if binary or not (is_allowed(old, test_files) and is_allowed(new, test_files)):
            dropped.append(new if new != "/dev/null" else old)
        else:
            kept.append(text)
    return FilteredPatch("".join(kept), tuple(dropped))


def _split_files(patch: str) -> list[tuple[str, str, str]] | None:
    starts = [m for m in _FILE_HEADER.finditer(patch)]
    if not starts:
        return _split_plain(patch)
    sections = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(patch)
        sections.append((m.group(1), m.group(2), patch[m.start() : end]))
    return sections


def _split_plain(patch: str) -> list[tuple[str, str, str]] | None:
    """Plain `diff -u` output (no git headers): split on '--- ' / '+++ ' pairs."""
    lines = patch.splitlines(keepends=True)
    idx = [i for i in range(len(lines) - 1) if lines[i].startswith("--- ") and lines[i + 1].startswith("+++ ")]
    if not idx:
        return None
    sections = []
    for j, i in enumerate(idx):
        end = idx[j + 1] if j + 1 < len(idx) else len(lines)
        old = _strip_prefix(lines[i][4:])
        new = _strip_prefix(lines[i + 1][4:])
        sections.append((old, new, "".join(lines[i:end])))
    return sections


def _strip_prefix(name: str) -> str:
    name = name.split("\t")[0].strip()
    return name[2:] if name.startswith(("a/", "b/")) else name
