"""A local directory that appears whole or not at all (weights, trainer state, a model copy).

Stage: the content is written into a hidden sibling `.<name>.<random>.tmp` (same
filesystem, so the rename below is atomic; a crash leaves only the hidden folder).
Commit: every file and folder of the stage is fsynced, the stage is renamed to the
target, the parent folder is fsynced. An existing target is first renamed away to
a hidden `.old` sibling and deleted after the commit: a crash between those two
renames leaves no target and the old content under the hidden name, never a target
that is half old and half new.

`atomic_dir` is the one-process form; `stage_dir` / `commit_dir` are its two halves
for writers that fill the stage from several processes (trainer state: every rank
writes, the main process commits).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from storage.atomic import fsync_dir


def stage_dir(target: Path) -> Path:
    """A new, empty hidden staging directory beside `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    stage.mkdir()
    return stage


def commit_dir(stage: Path, target: Path, replace: bool = True) -> bool:
    """Make the fully written `stage` durable and rename it to `target`.

    An existing `target` is replaced, or with `replace=False` kept (the stage is
    deleted and False returned: someone else committed the same content first)."""
    if target.exists() and not replace:
        shutil.rmtree(stage, ignore_errors=True)
        return False
    fsync_tree(stage)
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.{uuid.uuid4().hex}.old"
        os.replace(target, old)
    try:
        os.replace(stage, target)
    except OSError:
        if replace or not target.exists():
            raise
        shutil.rmtree(stage, ignore_errors=True)  # another writer committed it meanwhile
        return False
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return True


@contextmanager
def atomic_dir(target: str | os.PathLike[str], replace: bool = True) -> Iterator[Path]:
    """Yield an empty staging directory; on a clean exit it becomes `target` (`commit_dir`),
    on an exception it is deleted and `target` is left as it was."""
    target = Path(target)
    stage = stage_dir(target)
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    commit_dir(stage, target, replace)


def fsync_tree(root: Path) -> None:
    """fsync every regular file under `root`, then every folder bottom-up (links are not followed)."""
    for folder, _subdirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)
