"""The trainer's resumable state mirrored into the lake, so a trainer lane restarted
on another machine (an empty local state folder) continues at its last step.

    <root>/<run>/trainer_state/step-00000007/   the files of checkpoint.save_state,
                                                progress.json written last

Accelerate saves to and loads from a local folder (engines/trainer/checkpoint.py);
after each committed save its files are uploaded, `progress.json` last: that file
is the commit marker, so a trainer killed mid-upload leaves the previous state as
the newest complete one. Older states beyond `keep_last` are deleted, marker first.
At start, a lake state newer than the local ones is downloaded into a hidden
folder, fsynced and renamed into place (storage/atomic_dir.py), then loaded as usual.

On a local lake whose state folder is the local state folder nothing is copied.

A local state the lake cannot have made is set aside, not resumed (`set_aside_foreign`):
a state after step s needs weight version s in the lake (v0 before step 0; the trainer
publishes v s in step s - 1), so a newer local state is another lake's run of the same
name, or of a lake since emptied.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from engines.trainer.checkpoint import list_states, state_dir
from storage import checkpoints
from storage.atomic_dir import atomic_dir
from storage.fs import Store

MARKER = "progress.json"
_STEP_RE = re.compile(r"/step-(\d{8})/" + re.escape(MARKER) + "$")


def lake_dir(store: Store, run: str) -> str:
    return store.path(run, "trainer_state")


def is_in_lake(store: Store, run: str, local_root: Path) -> bool:
    """True when the local state folder is the lake's own (a local lake, default folder)."""
    return store.protocol == "file" and Path(lake_dir(store, run)).resolve() == Path(local_root).resolve()


def lake_steps(store: Store, run: str) -> list[int]:
    """Steps with a complete state in the lake, ascending."""
    files = store.call("list trainer states", lambda: store.fs.glob(f"{lake_dir(store, run)}/step-*/{MARKER}"))
    return sorted(int(m.group(1)) for f in files if (m := _STEP_RE.search(f)))


def upload(store: Store, run: str, local_root: Path, step: int, keep_last: int) -> str:
    """Copy the committed local state of `step` into the lake; drop older lake states."""
    src = state_dir(local_root, step)
    dest = f"{lake_dir(store, run)}/{src.name}"
    _remove(store, dest)  # a redone step replaces its older upload, marker first
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name != MARKER)
    for file in files:
        target = f"{dest}/{file.relative_to(src).as_posix()}"
        store.call(f"upload {store.full_url(target)}", lambda f=file, t=target: store.fs.put_file(str(f), t))
    marker = f"{dest}/{MARKER}"
    store.call(f"upload {store.full_url(marker)}", lambda: store.fs.put_file(str(src / MARKER), marker))
    for old in lake_steps(store, run)[:-keep_last]:
        _remove(store, f"{lake_dir(store, run)}/{state_dir(Path('.'), old).name}")
    return store.full_url(dest)


def set_aside_foreign(store: Store, run: str, local_root: Path) -> Path | None:
    """Rename `local_root` aside when its newest state is newer than the lake's newest
    weight version (see the module's docstring); the folder it went to, or None."""
    local = list_states(local_root)
    if not local:
        return None
    published = checkpoints.latest(store, run)
    if published is not None and published.version >= local[-1]:
        return None
    aside = local_root.with_name(f"{local_root.name}.foreign-{time.strftime('%Y%m%d-%H%M%S')}")
    local_root.rename(aside)
    return aside


def download_newer(store: Store, run: str, local_root: Path) -> int | None:
    """Bring the newest lake state here when no local state is as new; returns its step."""
    steps = lake_steps(store, run)
    local = list_states(local_root)
    if not steps or (local and local[-1] >= steps[-1]):
        return None
    step = steps[-1]
    final = state_dir(local_root, step)
    remote = f"{lake_dir(store, run)}/{final.name}"
    # An incomplete local folder of the same step is replaced (storage/atomic_dir.py: fsynced, renamed).
    with atomic_dir(final) as partial:
        store.call(
            f"download {store.full_url(remote)}", lambda: store.fs.get(remote + "/", str(partial), recursive=True)
        )
        if not (partial / MARKER).is_file():
            raise FileNotFoundError(f"trainer state {store.full_url(remote)} has no {MARKER}")
    return step


def _remove(store: Store, path: str) -> None:
    marker = f"{path}/{MARKER}"
    if store.call("check trainer state", lambda: store.fs.exists(marker)):
        store.call("delete trainer state", lambda: store.fs.rm(marker))
    if store.call("check trainer state", lambda: store.fs.exists(path)):
        store.call("delete trainer state", lambda: store.fs.rm(path, recursive=True))
