"""Plain data of the pool: one server as the pool sees it, and the weights all servers should serve."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engines.inference.server_process import LocalServer

if TYPE_CHECKING:
    from engines.inference.types import KvRole


@dataclass(eq=False)
class ServerSlot:
    """One server as the pool sees it."""

    index: int
    url: str
    semaphore: asyncio.Semaphore
    process: LocalServer | None = None  # None for servers given by URL
    version: int = 0  # weight version currently loaded
    load: int = 0  # requests waiting for or holding this server's semaphore
    healthy: bool = True  # answering; False while it is checked or restarted
    verified: bool = True  # False once its loaded weights failed the check, until an update passes it
    restarts: int = 0
    recovering: asyncio.Task[None] | None = field(default=None, repr=False)
    role: KvRole | None = None  # prefill (kv_producer) or decode (kv_consumer) server; None: both

    @property
    def routable(self) -> bool:
        return self.healthy and self.verified


@dataclass
class ServedWeights:
    """What every server should serve now; a server restarted after a crash is brought up to it."""

    version: int
    weights_dir: str | None = None  # last directory published to update_weights
    reload_from: str | None = None  # what servers reload for it (weight_dirs.reload_dir); None: model_dir
    expected: dict[str, str] | None = None  # tensor digests a server that loaded it must report; None: unchecked
