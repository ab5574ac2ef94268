"""The one way this project writes a file: whole or not at all.

Local disk: write a hidden temp file in the target directory, fsync it, rename it
over the target, fsync the directory. A crash leaves at most a hidden `.tmp` file
that no glob of `*.parquet` matches.
S3: a PUT (or a completed multipart upload) is atomic by the protocol; an upload
interrupted before completion never creates the object.
Either way a rewrite of the same name replaces the old content, so retries never
duplicate.
"""

from __future__ import annotations

import os
import uuid

from storage.fs import Store


def write_bytes_atomic(store: Store, relpath: str, data: bytes) -> str:
    """Write `data` to `relpath` under the store root atomically; returns the path."""
    target = store.path(relpath)
    if store.protocol == "file":
        _write_local(target, data)
    else:
        store.call(f"write {store.url(relpath)}", lambda: store.fs.pipe_file(target, data))
    return target


def _write_local(target: str, data: bytes) -> None:
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
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
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
