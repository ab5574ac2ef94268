"""Which parts of a model's patch the grader accepts.

A patch may change the project's source, nothing that decides how tests run or
what they check: test files, conftest.py, pytest/tox/setup/pyproject
configuration, import hooks (.pth, sitecustomize), symlinks, submodules and binary
blobs are dropped, so the known reward hacks (a conftest that rewrites failures to
passes, deleting or editing tests) never reach the test run. Dropped files are
reported, not silently lost.

The paths judged are the ones git itself reads from the patch (patch_paths.py),
never a regular expression's reading of its headers; the grader also checks the
tree after applying (workspace.changed_paths), so whatever git's parser and ours
disagree on still cannot reach a protected file.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from engines.env.patch_paths import Touched, git_touched
from engines.env.types import Task

_DENIED_NAMES = {
    "conftest.py",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "tox.ini",
    "pytest.ini",
    "noxfile.py",
    ".coveragerc",
    "manifest.in",
    "sitecustomize.py",
    "usercustomize.py",
    "__init__.pyi",
}
_TEST_DIRS = {"test", "tests", "testing"}


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
    """Keep the file sections of `patch` whose every path, as git reads it, is allowed.

    Decided on what git would touch (patch_paths.py), never on header text: each
    section is asked alone, and the kept text is asked again as a whole, so a section
    that hides a second file (a quoted header, a bare `--- / +++` pair) cannot get
    through on its neighbour's name.
    """
    if "\0" in patch:
        return FilteredPatch("", (), "patch contains NUL bytes (binary junk); send a text unified diff")
    if not patch.strip():
        return FilteredPatch("", ())
    whole = git_touched(patch)
    if isinstance(whole, str) or not whole.paths:
        return FilteredPatch("", (), "patch is not a unified diff git can read (no file sections)")
    if not _refused(whole, test_files):
        return FilteredPatch(patch, ())  # the common case: one look by git, nothing to cut
    kept, dropped = [], []
    for section in split_sections(patch):
        touched = git_touched(section)
        if isinstance(touched, str) or not touched.paths:
            continue  # text between sections that git ignores; ignored here too
        refused = _refused(touched, test_files)
        if refused:
            dropped += [p for p in refused if p not in dropped]
        else:
            kept.append(section)
    text = "".join(kept)
    check = git_touched(text) if text else None
    if isinstance(check, Touched) and _refused(check, test_files):
        # The kept sections read together touch what none touched alone: refuse it all.
        return FilteredPatch("", tuple(dropped), "patch sections combine into a change of protected files; not applied")
    return FilteredPatch(text, tuple(dropped))


def _refused(touched: Touched, test_files: frozenset[str]) -> list[str]:
    """The paths that make `touched` unacceptable (every path when the section is a
    binary patch or creates a symlink or submodule)."""
    if touched.binary or touched.special:
        return sorted(touched.paths)
    return sorted(p for p in touched.paths if not is_allowed(p, test_files))


def split_sections(patch: str) -> list[str]:
    """Cut `patch` before each line that may start a file's section: `diff --git`
    (quoted names included) or, in a diff without git headers, a `--- / +++` pair.
    Where this cuts wrong, git's reading of each piece still decides (filter_patch)."""
    lines = patch.splitlines(keepends=True)
    git_style = any(line.startswith("diff --git ") for line in lines)
    starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith("diff --git ")
        or (not git_style and line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "))
    ]
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    bounds = [*starts, len(lines)]
    return ["".join(lines[a:b]) for a, b in zip(bounds, bounds[1:]) if a < b]


def protected_files(task: Task) -> frozenset[str]:
    """The task's test files: those of its FAIL_TO_PASS and PASS_TO_PASS tests and the
    ones its metadata names; no patch may change them."""
    files = {t.split("::")[0] for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS)}
    return frozenset(files | set(task.meta().get("test_files", [])))
