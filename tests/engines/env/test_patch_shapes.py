"""Patch shapes a policy can write to reach the tests it must not touch.

Property: whatever sections a patch is made of (quoted or octal-escaped names,
renames and copies onto protected files, mode changes, symlinks, deletions, binary
sections, `..` paths, CRLF, sections without `diff --git` lines, a bare `--- / +++`
pair hidden inside a git section, files that configure test runs), what the filter
keeps, applied by git the way the grader applies it, changes no protected path and
creates no symlink. And a plain source edit beside the attacks is still kept.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.env.patches import filter_patch, is_allowed
from engines.env.workspace import Workspace, git_apply

pytestmark = pytest.mark.faults

BASE = {
    "m.py": b"x = 1\n",
    "pkg/core.py": b"def f():\n    return 1\n",
    "tests/test_m.py": b"def test_m():\n    assert False\n",
    "conftest.py": b"# empty\n",
    "setup.cfg": b"[metadata]\n",
    "pyproject.toml": b"[project]\n",
    "tox.ini": b"[tox]\n",
    "pytest.ini": b"[pytest]\n",
}
# Files that decide how tests run or what they check: a patch may never change these.
PROTECTED = [
    "tests/test_m.py",
    "conftest.py",
    "pytest.ini",
    "setup.cfg",
    "tox.ini",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "evil.pth",
    "pkg/conftest.py",
    "test_extra.py",
    "tests/helper.py",
]
SOURCES = ["m.py", "pkg/core.py", "pkg/new.py"]


def _octal(name: str) -> str:
    """The name as git quotes it, with every letter octal-escaped."""
    return "".join(f"\\{ord(c):03o}" if c.isalpha() else c for c in name)


def _names(path: str, style: str) -> tuple[str, str]:
    if style == "quoted":
        return f'"a/{path}"', f'"b/{path}"'
    if style == "octal":
        return f'"a/{_octal(path)}"', f'"b/{_octal(path)}"'
    return f"a/{path}", f"b/{path}"


HOOK = "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    (yield).get_result().outcome = 'passed'\n"


def section(kind: str, path: str, style: str) -> str:
    """One file section of `kind` that targets `path`."""
    a, b = _names(path, style)
    body = "".join("+" + line + "\n" for line in HOOK.splitlines())
    n = len(HOOK.splitlines())
    exists = path in BASE
    old = BASE.get(path, b"").decode()
    minus = "".join("-" + line + "\n" for line in old.splitlines())
    k = len(old.splitlines())
    if kind == "write" and exists:
        return f"diff --git {a} {b}\n--- {a}\n+++ {b}\n@@ -1,{k} +1,{n} @@\n{minus}{body}"
    if kind in ("write", "create"):
        if exists:
            return section("write", path, style)
        return f"diff --git {a} {b}\nnew file mode 100644\n--- /dev/null\n+++ {b}\n@@ -0,0 +1,{n} @@\n{body}"
    if kind == "delete":
        if not exists:
            return ""
        return f"diff --git {a} {b}\ndeleted file mode 100644\n--- {a}\n+++ /dev/null\n@@ -1,{k} +0,0 @@\n{minus}"
    if kind in ("rename_onto", "copy_onto"):
        verb = "rename" if kind == "rename_onto" else "copy"
        src_a, _ = _names("m.py", style)
        return f"diff --git {src_a} {b}\nsimilarity index 100%\n{verb} from m.py\n{verb} to {path}\n"
    if kind == "rename_away":  # deletes a test by moving it into the source
        _, dst_b = _names("pkg/moved.py", style)
        return (
            f"diff --git {a} {dst_b}\nsimilarity index 100%\nrename from {path}\nrename to pkg/moved.py\n"
            if exists
            else ""
        )
    if kind == "mode":
        return f"diff --git {a} {b}\nold mode 100644\nnew mode 100755\n" if exists else ""
    if kind == "symlink":  # a source name that points at the test file
        link = "pkg/link.py"
        la, lb = _names(link, style)
        return f"diff --git {la} {lb}\nnew file mode 120000\n--- /dev/null\n+++ {lb}\n@@ -0,0 +1 @@\n+../{path}\n\\ No newline at end of file\n"
    if kind == "dotdot":
        return (
            f"diff --git a/pkg/../{path} b/pkg/../{path}\n--- a/pkg/../{path}\n+++ b/pkg/../{path}\n@@ -1,{k} +1,{n} @@\n{minus}{body}"
            if exists
            else ""
        )
    if kind == "plain":  # no diff --git line at all
        src = f"a/{path}" if exists else "/dev/null"
        return f"--- {src}\n+++ b/{path}\n@@ -{'1' if exists else '0'},{k} +1,{n} @@\n{minus}{body}"
    if kind == "hidden":  # an allowed git section with a bare pair for `path` inside it
        src = f"a/{path}" if exists else "/dev/null"
        return (
            f"diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1,2 +1,2 @@\n"
            f" def f():\n-    return 1\n+    return 2\n--- {src}\n+++ b/{path}\n@@ -{'1' if exists else '0'},{k} +1,{n} @@\n{minus}{body}"
        )
    if kind == "binary":
        return (
            (
                f"diff --git {a} {b}\nnew file mode 100644\n{BINARY_INDEX}\nGIT binary patch\n"
                f"literal {len(BINARY)}\n{BINARY_LITERAL}\n\nliteral 0\nHcmV?d00001\n\n"
            )
            if not exists
            else ""
        )
    raise ValueError(kind)


def _binary_literal() -> tuple[bytes, str, str]:
    """A binary section's payload as git writes it (made by git itself, once)."""
    data = bytes(range(256))[:40]
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "GIT_CEILING_DIRECTORIES": os.path.dirname(tmp)}
        run = lambda *a: subprocess.run(["git", *a], cwd=tmp, env=env, capture_output=True, check=True).stdout  # noqa: E731
        run("init", "-q")
        Path(tmp, "blob.bin").write_bytes(data)
        run("add", "-N", "blob.bin")
        diff = run("diff", "--binary", "--full-index", "blob.bin").decode()
    index = next(line for line in diff.splitlines() if line.startswith("index "))
    lines = diff.split("GIT binary patch\n", 1)[1].splitlines()
    return data, lines[1], index.split()[0] + " " + index.split()[1]


BINARY, BINARY_LITERAL, BINARY_INDEX = _binary_literal()
KINDS = [
    "write",
    "create",
    "delete",
    "rename_onto",
    "copy_onto",
    "rename_away",
    "mode",
    "symlink",
    "dotdot",
    "plain",
    "hidden",
    "binary",
]
STYLES = ["plain", "quoted", "octal"]
ALLOWED_EDIT = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"

attack = st.tuples(st.sampled_from(KINDS), st.sampled_from(PROTECTED), st.sampled_from(STYLES))
patches = st.tuples(
    st.lists(attack, min_size=1, max_size=3),
    st.integers(0, 3),  # where the allowed edit goes among the attacks
    st.booleans(),  # CRLF line endings
)


def _assemble(attacks: list[tuple[str, str, str]], edit_at: int, crlf: bool) -> str:
    parts = [section(*a) for a in attacks]
    parts.insert(min(edit_at, len(parts)), ALLOWED_EDIT)
    text = "".join(parts)
    return text.replace("\n", "\r\n") if crlf else text


def _applied_changes(text: str) -> tuple[str, list[str], list[str]]:
    """Apply `text` to a fresh copy of BASE as the grader does; git's error, the changed
    paths and the symlinks in the tree."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp) / "repo", dict(BASE))
        error = git_apply(ws.root, text)
        links = [str(p.relative_to(ws.root)) for p in ws.root.rglob("*") if p.is_symlink()]
        return error, ws.changed_paths(), links


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patches)
def test_no_kept_section_reaches_a_protected_path(shape) -> None:
    attacks, edit_at, crlf = shape
    patch = _assemble(attacks, edit_at, crlf)
    filtered = filter_patch(patch)
    if filtered.error or not filtered.text:
        return
    error, changed, links = _applied_changes(filtered.text)
    assert not links, (patch, filtered.text)
    assert all(is_allowed(p) for p in changed), (changed, patch, filtered.text)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(["write", "create", "delete", "rename_onto", "copy_onto", "mode", "binary"]).flatmap(
            lambda kind: st.tuples(st.just(kind), st.sampled_from(PROTECTED), st.sampled_from(STYLES))
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(0, 3),
)
def test_a_source_edit_beside_separate_attack_sections_is_kept(attacks, edit_at) -> None:
    patch = _assemble(attacks, edit_at, False)
    filtered = filter_patch(patch)
    assert not filtered.error, filtered.error
    error, changed, _ = _applied_changes(filtered.text)
    assert error == "" and changed == ["m.py"], (error, changed, patch, filtered.text)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("style", STYLES)
def test_each_shape_alone_changes_no_protected_file(kind: str, style: str) -> None:
    """The unfiltered attack does reach its target (so the shape is real), the filtered one does not."""
    new_file = kind in ("create", "binary", "rename_onto", "copy_onto")
    target = "pkg/conftest.py" if new_file else "conftest.py"
    text = section(kind, target, style)
    raw_error, raw_changed, raw_links = _applied_changes(text)
    # git itself refuses '..' paths; a mode change leaves the content as it was.
    if kind not in ("dotdot", "mode"):
        assert raw_error == "" and (raw_links or any(not is_allowed(p) for p in raw_changed)), (
            kind,
            raw_error,
            raw_changed,
        )
    filtered = filter_patch(text)
    if filtered.text:
        error, changed, links = _applied_changes(filtered.text)
        assert not links and all(is_allowed(p) for p in changed)


@pytest.mark.sandbox
def test_a_quoted_conftest_after_a_source_edit_does_not_resolve_a_task(micro_tasks, env_config) -> None:
    """The attack as reproduced: an allowed edit, then a quoted-header conftest.py that
    marks every test passed. Before, the conftest was applied and the task resolved."""
    from engines.env.grader import GradingPool
    from engines.env.workspace import base_files, unified_diff

    task = micro_tasks[0]
    base = base_files(task)
    edit = unified_diff(base, base | {"m.py": base["m.py"] + b"\n# harmless\n"})
    hook = "".join("+" + line + "\n" for line in HOOK.splitlines())
    conftest = (
        f'diff --git "a/conftest.py" "b/conftest.py"\nnew file mode 100644\n--- /dev/null\n'
        f'+++ "b/conftest.py"\n@@ -0,0 +1,{len(HOOK.splitlines())} @@\n{hook}'
    )
    with GradingPool(env_config, workers=1) as pool:
        attacked = pool.grade_one(task, edit + conftest)
        gold = pool.grade_one(task, task.patch)
    assert gold.resolved  # the grader does resolve a real fix
    assert not attacked.resolved and "conftest.py" in attacked.notes, attacked
