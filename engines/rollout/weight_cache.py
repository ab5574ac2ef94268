"""Published weight versions pulled from an s3:// lake onto a server host, at most
`max_versions` of them at a time.

Servers read local files, so each version the trainer publishes to S3 is copied to
`<root>/v<version>/` before the servers load it. A copy is written into a hidden
folder, fsynced and renamed into place (storage/atomic_dir.py: a host that dies
mid-copy leaves no half version that looks complete). Before each new copy the oldest versions not in use are deleted:
the servers still need the version they serve (a restarted server reloads it) and
the one they started from (its config and weights start every restarted server).

Each copy keeps the listing it was made from (names, sizes, ETags: `SOURCE`), and is
used again only while the lake's files still match it: a lake emptied and a run of the
same name started again publishes other weights under the same URIs.

Weights on a local lake are already on this host's disk: they are used in place and
nothing is copied.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from engines.model.load import local_model_dir
from storage.atomic_dir import atomic_dir
from storage.fs import Store

_VERSION_DIR = re.compile(r"^v(\d+)$")
SOURCE = ".source.json"  # in each copy: the lake's listing it was copied from


class WeightCacheFullError(RuntimeError):
    """Every cached version is in use: a new one would exceed the bound."""


class WeightCache:
    def __init__(self, store: Store, root: Path, max_versions: int) -> None:
        if max_versions < 1:
            raise ValueError(f"max_versions must be >= 1, got {max_versions}")
        self.store = store
        self.root = Path(root)
        self.max_versions = max_versions
        self._matched: set[int] = set()  # versions this cache copied or found matching the lake

    def versions(self) -> list[int]:
        """Versions completely copied here, ascending."""
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _VERSION_DIR.match(p.name)))

    def local_dir(self, uri: str, version: int, in_use: set[int]) -> Path:
        """A local directory holding the weights published at `uri` as `version`;
        copied from S3 at most once, evicting versions not in `in_use` to make room."""
        if not uri.startswith("s3://"):
            return local_model_dir(uri)
        dest = self.root / f"v{version}"
        if version in self._matched and (dest / "config.json").is_file():
            return dest  # checked once: a version's weights do not change within a run
        remote = self._remote_path(uri)
        source = self._listing(uri, remote)
        if (dest / "config.json").is_file() and _read(dest / SOURCE) == source:
            self._matched.add(version)
            return dest
        shutil.rmtree(dest, ignore_errors=True)  # another run's copy of this version, or none
        self.evict(in_use | {version}, room=1)
        with atomic_dir(dest) as partial:
            self.store.call(f"download {uri}", lambda: self.store.fs.get(remote + "/", str(partial), recursive=True))
            if not (partial / "config.json").is_file():
                raise FileNotFoundError(f"{uri} has no config.json: the trainer publishes whole model directories")
            (partial / SOURCE).write_text(source)
        self._matched.add(version)
        return dest

    def _listing(self, uri: str, remote: str) -> str:
        """The files of the published version as the lake lists them: name, size, ETag."""
        entries = self.store.call(f"list {uri}", lambda: self.store.fs.ls(remote, detail=True, refresh=True))
        files = [(e["name"].rsplit("/", 1)[-1], e.get("size"), e.get("ETag")) for e in entries if e["type"] == "file"]
        return json.dumps(sorted(files))

    def evict(self, in_use: set[int], room: int = 0) -> list[int]:
        """Delete the oldest versions not in `in_use` until `room` more fit; returns them."""
        cached = self.versions()
        removable = [v for v in cached if v not in in_use]
        excess = len(cached) + room - self.max_versions
        if excess > len(removable):
            raise WeightCacheFullError(
                f"the weight cache {self.root} holds versions {cached}, {sorted(in_use & set(cached))} in use; "
                f"{room} more would exceed its {self.max_versions} versions: raise inference.weight_cache_versions"
            )
        dropped = removable[: max(excess, 0)]
        for version in dropped:
            shutil.rmtree(self.root / f"v{version}")
        return dropped

    def _remote_path(self, uri: str) -> str:
        prefix = f"{self.store.protocol}://"
        if not uri.startswith(prefix):
            raise ValueError(f"weights at {uri} are not on the lake {self.store.display}")
        return uri[len(prefix) :].rstrip("/")


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None
