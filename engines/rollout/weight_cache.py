"""Published weight versions pulled from an s3:// lake onto a server host, at most
`max_versions` of them at a time.

Servers read local files, so each version the trainer publishes to S3 is copied to
`<root>/v<version>/` before the servers load it. A copy is written into a hidden
folder, fsynced and renamed into place (storage/atomic_dir.py: a host that dies
mid-copy leaves no half version that looks complete). Before each new copy the oldest versions not in use are deleted:
the servers still need the version they serve (a restarted server reloads it) and
the one they started from (its config and weights start every restarted server).

Weights on a local lake are already on this host's disk: they are used in place and
nothing is copied.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from engines.model.load import local_model_dir
from storage.atomic_dir import atomic_dir
from storage.fs import Store

_VERSION_DIR = re.compile(r"^v(\d+)$")


class WeightCacheFullError(RuntimeError):
    """Every cached version is in use: a new one would exceed the bound."""


class WeightCache:
    def __init__(self, store: Store, root: Path, max_versions: int) -> None:
        if max_versions < 1:
            raise ValueError(f"max_versions must be >= 1, got {max_versions}")
        self.store = store
        self.root = Path(root)
        self.max_versions = max_versions

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
        if (dest / "config.json").is_file():
            return dest
        self.evict(in_use | {version}, room=1)
        remote = self._remote_path(uri)
        with atomic_dir(dest) as partial:
            self.store.call(f"download {uri}", lambda: self.store.fs.get(remote + "/", str(partial), recursive=True))
            if not (partial / "config.json").is_file():
                raise FileNotFoundError(f"{uri} has no config.json: the trainer publishes whole model directories")
        return dest

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
