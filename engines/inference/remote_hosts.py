"""The servers of a pool's other machines (`inference.hosts` > 1), as those machines
report them.

Host 0 is the pool's own machine. Every other host starts its share of the servers
and copies each published weight version into a cache of its own, so a server there
reloads from a folder on its own disk: the pool asks the host where its servers are
and, for each version, in which folder it lies, checked against the export's digests.
The pool then reloads those servers like its own and checks that each read that folder.
engines/rollout/server_hosts.py answers through the lake.
"""

from __future__ import annotations

from typing import Protocol


class RemoteHosts(Protocol):
    async def server_urls(self, host: int) -> list[str]:
        """The URLs of the servers host `host` started, once they are healthy."""
        ...

    async def reload_from(self, host: int, version: int) -> str:
        """The folder on host `host` its servers reload `version` from, once it is there and checked."""
        ...
