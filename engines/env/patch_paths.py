"""The paths a patch makes git touch, read by git's own parser.

A filter that reads headers with its own regular expressions can be walked around:
a quoted header (`diff --git "a/x" "b/y"`), an octal-escaped name, a plain
`--- / +++` pair inside a git section, a rename whose source is a test file. Here
git decides: `git apply --numstat -z` lists, unquoted, every file the patch would
write (with -R: every file it would read away, so the source of a rename), and
`--summary` names symlinks and submodules it would create. Both parse modes that
`workspace.git_apply` may apply with are asked, since a patch whose hunk counts are
wrong parses differently under `--recount`.

Owns the question "what would git touch"; the allowlist (`patches.py`) answers
"may it". Measured on 2 busy cores: about 5 ms per git call, 2 calls per patch (4 with a
rename), so about 10 ms per patch against about 0.8 s of sandboxed tests.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

# The argument sets `workspace.git_apply` applies with, in order.
APPLY_MODES: tuple[tuple[str, ...], ...] = ((), ("--recount", "-C1"))
_SPECIAL_MODES = (" 120000", " 160000")  # symlink, submodule (gitlink)


@dataclass(frozen=True)
class Touched:
    paths: frozenset[str]  # every path written, created, deleted or renamed from
    binary: bool  # a section git reads as a binary patch
    special: tuple[str, ...]  # summary lines creating or changing symlinks / submodules


def git_touched(patch: str) -> Touched | str:
    """What git would touch when applying `patch` (in either mode); a message when git
    cannot read it at all."""
    data = patch.encode("utf-8", "surrogateescape")
    paths: set[str] = set()
    binary, special = False, []
    readable = False
    for mode in APPLY_MODES:
        for reverse in ((), ("-R",)):
            out = _git(["apply", "--numstat", "--summary", "-z", "--allow-empty", *mode, *reverse, "-"], data)
            if out is None:
                continue
            readable = True
            stats, _, summary = out.rpartition(b"\0")
            for record in stats.split(b"\0") if stats else []:
                added, deleted, name = record.split(b"\t", 2)
                paths.add(name.decode("utf-8", "surrogateescape"))
                binary |= added == b"-" or deleted == b"-"
            lines = summary.decode(errors="replace").splitlines()
            special += [line.strip() for line in lines if any(m in line for m in _SPECIAL_MODES)]
            if not any(line.lstrip().startswith("rename ") for line in lines):
                break  # -R adds only the sources of renames (numstat names their targets)
    if not readable:
        return "git cannot read the patch as a diff"
    return Touched(frozenset(paths), binary, tuple(dict.fromkeys(special)))


def _git(args: list[str], data: bytes) -> bytes | None:
    # cwd "/" and no repository: git must not resolve paths against an enclosing one.
    env = {"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": "/", "HOME": "/nonexistent"}
    proc = subprocess.run(["git", *args], input=data, cwd="/", env=env, capture_output=True)
    return proc.stdout if proc.returncode == 0 else None
