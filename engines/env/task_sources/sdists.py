"""Source distributions from PyPI: pinned by version and sha256, cached outside the repo.

`pip download` fetches the sdist at build time (no sdist is ever committed); the
archive's sha256 must equal the pin, so a corpus is rebuilt from exactly the same
code. Archives are cached under ~/.cache/tandem-rl/sdists (TANDEM_CACHE moves it).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from engines.env.errors import BuildError


@dataclass(frozen=True)
class SdistPin:
    name: str
    version: str
    sha256: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @classmethod
    def parse(cls, text: str) -> SdistPin:
        """'name' (a default pin) or 'name==version:sha256'."""
        if "==" not in text:
            for pin in DEFAULT_PINS:
                if pin.name == text:
                    return pin
            raise BuildError(
                f"no default pin for {text!r}; give 'name==version:sha256' (defaults: {[p.name for p in DEFAULT_PINS]})"
            )
        name, _, rest = text.partition("==")
        version, _, sha = rest.partition(":")
        if len(sha) != 64:
            raise BuildError(f"{text!r}: give the sdist's sha256 after the version, as 'name==version:<64 hex digits>'")
        return cls(name, version, sha.lower())

    def materialise(self, dest: Path) -> Path:
        """The unpacked sdist at `dest` (downloaded once into the cache)."""
        return extract_sdist(fetch_sdist(self), dest)


# Pure-Python projects whose sdists ship pytest suites that run in seconds. Measured
# here (2 cores, bubblewrap): stable tests / tests, slowest clean suite run, mutants
# tried per kept task in a 3-task trial. Tried and left out: more-itertools 11.2.1
# (a 45 s suite), jmespath 1.1.0 (1 of 6 tests stable: its compliance suite is data
# files), wcwidth 0.9.4 (no stable test in the sandbox), sortedcontainers 2.4.0 (no
# tests in the sdist), bidict 0.23 (pip cannot prepare its sdist: a build dependency needs Rust).
DEFAULT_PINS = (
    SdistPin("toolz", "1.2.0", "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490"),
    SdistPin("funcy", "2.1", "8979feb3de7120afd1d00e5a8eae810c1942e4bfbc91697151e9ee1e49f79284"),
    SdistPin("cachetools", "8.0.2", "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0"),
    SdistPin("tinydb", "4.9.0", "6928b1fa785186bda7952a0ba05aaeedc883ede565ca9c7d608de44e5e75de70"),
    SdistPin("voluptuous", "0.16.0", "006535e22fed944aec17bef6e8725472476194743c87bd233e912eb463f8ff05"),
    SdistPin("xmltodict", "1.0.4", "6d94c9f834dd9e44514162799d344d815a3a4faec913717a9ecbfa5be1bb8e61"),
    # 109/109 stable, 2.4 s, 2.7 mutants per task
    SdistPin("parse", "1.22.4", "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5"),
    # 412/449 stable, 1.3 s, 2.7 mutants per task
    SdistPin("inflection", "0.5.1", "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"),
    # 118/118 stable, 0.9 s, 1.3 mutants per task
    SdistPin("schema", "0.7.8", "e86cc08edd6fe6e2522648f4e47e3a31920a76e82cce8937535422e310862ab5"),
    # 507/515 stable, 1.2 s, 4 mutants per task
    SdistPin("semver", "3.1.2", "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf"),
    # 295/295 stable, 2.9 s, 1.3 mutants per task
    SdistPin("tabulate", "0.10.0", "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d"),
    # 21/23 stable, 0.7 s, 4 mutants per task
    SdistPin("toml", "0.10.2", "b3bda1d108d5dd99f4a20d24d9c348e91c4db7ab1b749200bded2f839ccbe68f"),
    # 59/61 stable, 5.9 s, 2.7 mutants per task; 6 test dependencies (jaraco.*, big-O, ...)
    SdistPin("zipp", "4.1.2", "cf474b90b07ea932637e17c6b9479de2b2882900b0d311bdaf4f5c000a15a97f"),
    # 255/875 stable (locale tests need compiled catalogs), 5.1 s, 2.7 mutants per task; freezegun & co.
    SdistPin("humanize", "4.17.0", "1d6a36c453dbfbb3f0b34601d2e0b4ce5d48d780305cd45714843f0068fde6ac"),
    # 197/197 stable, 1.0 s, 6.7 mutants per task
    SdistPin("pathspec", "1.1.1", "17db5ecd524104a120e173814c90367a96a98d07c45b2e10c2f3919fff91bf5a"),
    # 140/140 stable, 2.2 s, 1.3 mutants per task; needs text-unidecode
    SdistPin("python-slugify", "9.2.0", "cee32948083476013804de1667724fb1362dacb71e47b1d5d92adf8db6ee3298"),
)


def cache_dir() -> Path:
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem-rl")) / "sdists"


def fetch_sdist(pin: SdistPin, cache: Path | None = None) -> Path:
    """The pinned archive, downloaded once; raises BuildError on a hash mismatch."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for path in _cached_archives(cache, pin):
        if _sha256(path) == pin.sha256:
            return path
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            tmp,
            pin.spec,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        files = list(Path(tmp).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            raise BuildError(
                f"{pin.spec}: pip download failed ({proc.stderr.strip()[-300:]}); check the name and version on PyPI"
            )
        digest = _sha256(files[0])
        if digest != pin.sha256:
            raise BuildError(
                f"{pin.spec}: sha256 {digest} does not match the pin {pin.sha256}; update the pin only if you trust the new file"
            )
        dest = cache / files[0].name
        shutil.move(files[0], dest)
        return dest


def _cached_archives(cache: Path, pin: SdistPin) -> list[Path]:
    """Archives of `pin` in the cache, under the name as pinned or as PEP 625 spells it
    (python-slugify's sdist is python_slugify-9.2.0.tar.gz): found either way, never
    downloaded twice."""
    names = {pin.name, re.sub(r"[-_.]+", "_", pin.name).lower()}
    return sorted({p for n in names for p in cache.glob(f"{n}-{pin.version}.*")})


def extract_sdist(archive: Path, dest: Path) -> Path:
    """Unpack to `dest` (safe extraction: no absolute paths, links or escapes); returns the project root."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                for name in z.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise BuildError(f"{archive.name}: unsafe path {name!r} in the archive")
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        entries = list(Path(tmp).iterdir())
        root = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(tmp)
        shutil.copytree(root, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return dest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
