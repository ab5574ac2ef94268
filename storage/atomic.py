"""The one way this project writes a file: whole or not at all.

Local disk: write a temp file under `<root>/.tmp/`, fsync it, rename it over the
target, fsync the target's directory. The temp file lives outside the table folders
because readers that open a whole folder (polars) refuse one that holds a file of
another kind, and a crash may leave a temp file behind; `<root>/.tmp` is on the
same filesystem as the target, so the rename stays atomic.
S3: a PUT (or a completed multipart upload) is atomic by the protocol; an upload
interrupted before completion never creates the object.
Either way a rewrite of the same name replaces the old content, so retries never
duplicate.

Whole local directories (weights, trainer state, a downloaded model) go through
`atomic_dir.py` beside this module, which uses `fsync_dir` from here.
"""

from __future__ import annotations

import os
import uuid

from storage.fs import Store

TMP_DIR = ".tmp"  # under the root; list_runs skips names starting with '.'


def write_bytes_atomic(store: Store, relpath: str, data: bytes) -> str:
    """Write `data` to `relpath` under the store root atomically; returns the path."""
    target = store.path(relpath)
    if store.protocol == "file":
        _write_local(target, data, store.path(TMP_DIR))
    else:
        store.call(f"write {store.url(relpath)}", lambda: store.fs.pipe_file(target, data))
    return target


def write_file_atomic(target: str | os.PathLike[str], data: bytes) -> None:
    """Write a local file that appears whole or not at all (staged as a hidden sibling)."""
    target = os.fspath(target)
    _write_local(target, data, os.path.dirname(os.path.abspath(target)))


def _write_local(target: str, data: bytes, tmp_dir: str) -> None:
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    os.makedirs(tmp_dir, exist_ok=True)
    tmp = os.path.join(tmp_dir, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the entries of `directory` (a rename into it, a new file) durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
