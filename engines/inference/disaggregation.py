"""Prefill/decode disaggregation: every request is sent through a prefill server, then
a decode server (the flow of vLLM's disaggregated-serving proxy).

1. The prefill server (a KV producer) gets the prompt with `max_tokens=1` and
   `kv_transfer_params = {"do_remote_decode": true}`; it computes the prompt's KV and
   hands it to its connector; its answer carries the connector's `kv_transfer_params`.
2. The decode server (a KV consumer) gets the same request with those params, loads
   the prompt's KV through its connector instead of computing it, and samples.

Tokens and logprobs come from the decode server alone, so episodes are what one
server would produce. A prefill server that fails is taken out of routing and the
decode server computes the prompt itself: slower, same result.

Router replay: the decode server never runs the prompt's tokens through the routers,
so the routes of the prompt positions come from the prefill answer and those of the
completion from the decode answer, joined into one record (`join_routes`).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.inference.client import ServerUnavailable, completion_body, parse_completions
from engines.inference.config import DisaggregationConfig, InferenceConfig
from engines.inference.types import Completion, KvRole, SamplingParams

if TYPE_CHECKING:
    from engines.inference.client import CompletionClient
    from engines.inference.server_process import ServerSlot

log = logging.getLogger(__name__)


def kv_transfer_config(d: DisaggregationConfig, role: KvRole, shared_path: str | None = None) -> dict[str, Any]:
    """vLLM's --kv-transfer-config for one server of the given role."""
    config: dict[str, Any] = {"kv_connector": d.kv_connector, "kv_role": role}
    if d.kv_connector == "ExampleConnector":
        path = d.shared_storage_path or shared_path
        if path is None:
            raise ValueError("ExampleConnector needs a shared storage path: set disaggregation.shared_storage_path")
        config["kv_connector_extra_config"] = {"shared_storage_path": path}
    return config


def server_roles(cfg: InferenceConfig) -> list[KvRole | None]:
    """The role of each local server the pool starts: prefill servers first."""
    d = cfg.cluster.disaggregation
    if d is None:
        return [None] * cfg.num_servers
    return ["kv_producer"] * d.num_prefill_servers + ["kv_consumer"] * d.num_decode_servers


def shared_kv_path(cfg: InferenceConfig, log_dir: Path) -> str | None:
    """Where ExampleConnector servers exchange KV files (created here), else None."""
    d = cfg.cluster.disaggregation
    if d is None or d.kv_connector != "ExampleConnector":
        return None
    path = Path(d.shared_storage_path) if d.shared_storage_path else log_dir / "kv-transfer"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def join_routes(prefill: np.ndarray, decode: np.ndarray, prompt_rows: int, completion_len: int) -> np.ndarray:
    """One per-token route record [prompt_rows + completion_len - 1, layers, top_k]:
    the prompt positions' routes from the prefill server, the generated positions'
    (all but the last token, which no forward pass consumed) from the decode server."""
    tail = max(completion_len - 1, 0)
    if prefill.shape[0] < prompt_rows or decode.shape[0] < tail or prefill.shape[1:] != decode.shape[1:]:
        raise ValueError(
            f"routes do not join: prefill {prefill.shape} for {prompt_rows} prompt positions, decode "
            f"{decode.shape} for {tail} generated positions"
        )
    return np.concatenate([prefill[:prompt_rows], decode[decode.shape[0] - tail :]])


class PrefillDecode:
    """Sends one request through a prefill server among `slots`, then its decode server.

    Given what it uses (the client, the fleet's slots and how a failed server is
    recovered) rather than the pool that holds it, so it never calls back into the pool."""

    def __init__(
        self,
        client: CompletionClient,
        model_name: str,
        slots: Sequence[ServerSlot],
        recover: Callable[[ServerSlot], None],
        shared_kv: str | None,
    ) -> None:
        self.client, self.model_name, self.slots, self.recover = client, model_name, slots, recover
        self.shared_kv = shared_kv  # ExampleConnector's files (shared_kv_path), else None

    def clear_shared_kv(self) -> None:
        """Drop the KV files of the old weights after a weight update. ExampleConnector
        stores a prompt once and serves that file to every later request for it, so a
        file written before the update would be served after it; clearing also bounds
        the folder to the prompts of one weight version."""
        if self.shared_kv is None:
            return
        for entry in Path(self.shared_kv).iterdir():
            shutil.rmtree(entry, ignore_errors=True)

    def _pick_prefill(self, session_id: str | None) -> ServerSlot | None:
        healthy = [s for s in self.slots if s.role == "kv_producer" and s.healthy]
        if not healthy:
            return None
        if session_id is not None:  # the turns of an episode reuse one prefill server's prefix cache
            return healthy[zlib.crc32(session_id.encode()) % len(healthy)]
        return min(healthy, key=lambda s: s.load)

    async def complete(
        self,
        decode: ServerSlot,
        prompt_ids: list[int],
        params: SamplingParams,
        routed_experts_start: int | None,
        session_id: str | None,
    ) -> Completion:
        prefill, kv_params = await self._prefill(prompt_ids, params, routed_experts_start, session_id)
        body = completion_body(self.model_name, prompt_ids, params, routed_experts_start)
        if kv_params is not None:
            body["kv_transfer_params"] = kv_params
        if session_id is not None:
            body["session_id"] = session_id
        data = await self.client.post(decode.url, body, f"a {len(prompt_ids)}-token decode request", retries=0)
        out = parse_completions(data, decode.url, decode.version, 1)[0]
        if routed_experts_start is not None and prefill is not None and out.routed_experts is not None:
            assert prefill.routed_experts is not None
            rows = len(prompt_ids) - routed_experts_start
            out.routed_experts = join_routes(prefill.routed_experts, out.routed_experts, rows, len(out.token_ids))
        return out

    async def _prefill(
        self, prompt_ids: list[int], params: SamplingParams, routed_experts_start: int | None, session_id: str | None
    ) -> tuple[Completion | None, dict[str, Any] | None]:
        """The prefill answer and the KV params for the decode server; (None, None) when
        no prefill server could take it (the decode server then computes the prompt)."""
        slot = self._pick_prefill(session_id)
        if slot is None:
            return None, None
        body = completion_body(
            self.model_name, prompt_ids, dataclasses.replace(params, max_tokens=1), routed_experts_start
        )
        body["kv_transfer_params"] = {"do_remote_decode": True}
        slot.load += 1
        try:
            async with slot.semaphore:
                data = await self.client.post(slot.url, body, f"a {len(prompt_ids)}-token prefill", retries=0)
        except ServerUnavailable as err:
            log.warning("prefill server %s failed (%s); the decode server computes the prompt", slot.url, err)
            self.recover(slot)
            return None, None
        finally:
            slot.load -= 1
        return parse_completions(data, slot.url, slot.version, 1)[0], data.get("kv_transfer_params")
