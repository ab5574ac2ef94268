"""Which server takes a request: session affinity, else the least-loaded routable server.

The turns of one session (episode) go to the same server so they reuse its prefix
cache; a new session, or one whose server left routing, goes to the least-loaded
server that is healthy and holds verified weights.
"""

from __future__ import annotations

from engines.inference.server_slot import ServerSlot


class Router:
    """Routes over `slots`, a list the pool fills and shares (never copied here)."""

    def __init__(self, slots: list[ServerSlot]) -> None:
        self.slots = slots
        self._affinity: dict[str, ServerSlot] = {}

    def pick(self, session_id: str | None) -> ServerSlot | None:
        """The server for the next request of `session_id`; None when no server is routable."""
        slot = self._affinity.get(session_id) if session_id is not None else None
        if slot is None or not slot.routable:
            # Prefill servers are reached only through a decode request (disaggregation.py).
            routable = [s for s in self.slots if s.routable and s.role != "kv_producer"]
            if not routable:
                return None
            slot = min(routable, key=lambda s: s.load)
            if session_id is not None:
                self._affinity[session_id] = slot
        return slot

    def release(self, session_id: str) -> None:
        """Forget a finished session's server (keeps the affinity table small)."""
        self._affinity.pop(session_id, None)

    def server_of(self, session_id: str) -> str | None:
        slot = self._affinity.get(session_id)
        return slot.url if slot else None
