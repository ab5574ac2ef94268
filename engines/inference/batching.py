"""Coalescing: completion requests bound for one server, arriving within a short
window with the same sampling, go out as ONE /v1/completions request with a list of
token-id prompts; its choices are split back to the callers by index.

Why: vLLM's API server parses, validates and answers every HTTP request in Python,
in the process that also feeds the engine. On a small CPU host, 64 concurrent
single-prompt requests reach the engine spread over a second or more, so it runs
more, smaller steps (measured 2-3x slower than one 64-prompt request, whose prompts
vLLM submits to its engine together). On a GPU host the same overhead is smaller
but not zero.

Requests share a batch only when everything but the prompt is equal: the server,
the sampling parameters (temperature, top_p, max_tokens, seed, stop ids, allowed
ids, ignore_eos), the routed-experts start and the weight version they carry. vLLM
0.32 takes one `seed` per request and seeds each of its prompts' generators with it,
so a seeded batch samples each prompt exactly as the same request sent alone would;
requests with different seeds never share a batch. A batch of two or more carries no
`session_id`, which vLLM 0.32 uses only to label KV-cache events.

Owns: grouping, the window, splitting the reply, re-sending one by one when the
server rejects a batch (one bad prompt must not fail the others). Does not choose
servers, bound concurrency or re-send after a dead server (`server_pool.py`): a
failed batch raises ServerUnavailable to each of its callers, who re-send as before.

Invariant: every caller gets its own completion or an exception; none is dropped,
also when the pool closes with requests still waiting.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engines.inference.client import CompletionClient, RequestRejected, ServerUnavailable
from engines.inference.types import Completion, SamplingParams
from engines.settle import settle

VLLM_MAX_PROMPTS = 1024  # vLLM's default VLLM_MAX_COMPLETION_PROMPTS: more prompts are refused
MAX_WAIT_WINDOWS = 4  # a group waits at most this many windows after its first request


@dataclass(frozen=True)
class BatchKey:
    """What must be equal for requests to share one request body."""

    url: str
    weight_version: int
    params: SamplingParams
    routed_experts_start: int | None


@dataclass
class Waiting:
    prompt_ids: list[int]
    session_id: str | None
    future: asyncio.Future[Completion]


@dataclass
class Group:
    deadline: float  # loop time by which the group is sent, however many still join
    members: list[Waiting] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class RequestCoalescer:
    """Sends completion requests through `client`, coalescing those that can share a body.

    `window_s`: a group is sent once no request joined it for this long, at most
    MAX_WAIT_WINDOWS windows after its first (0: every request is sent alone, at
    once). `max_prompts`: a group this large is sent at once.
    `retries`: the client's own re-sends of a batch (the pool re-sends itself: 0).
    """

    def __init__(
        self, client: CompletionClient, window_s: float, max_prompts: int = VLLM_MAX_PROMPTS, retries: int = 0
    ) -> None:
        self.client = client
        self.window_s = window_s
        self.max_prompts = max(1, min(max_prompts, VLLM_MAX_PROMPTS))
        self.retries = retries
        self.batches_sent = 0  # requests sent with two or more prompts (answered or not)
        self._open: dict[BatchKey, Group] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def complete(
        self,
        url: str,
        prompt_ids: list[int],
        params: SamplingParams,
        weight_version: int = 0,
        routed_experts_start: int | None = None,
        session_id: str | None = None,
    ) -> Completion:
        """Like `CompletionClient.complete`, sent alone or within a batch."""
        if self.window_s <= 0:
            return await self.client.complete(
                url, prompt_ids, params, weight_version, routed_experts_start, session_id, self.retries
            )
        key = BatchKey(url, weight_version, params, routed_experts_start)
        loop = asyncio.get_running_loop()
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = Group(deadline=loop.time() + MAX_WAIT_WINDOWS * self.window_s)
        waiting = Waiting(prompt_ids, session_id, loop.create_future())
        group.members.append(waiting)
        if len(group.members) >= self.max_prompts:
            self._flush(key)
        else:
            # Sent once no request joined for a window (a burst of episodes reaches the pool
            # spread over ~15 ms on a busy 2-core host), and at the latest at the deadline.
            if group.timer is not None:
                group.timer.cancel()
            group.timer = loop.call_at(min(loop.time() + self.window_s, group.deadline), self._flush, key)
        return await waiting.future

    def _flush(self, key: BatchKey) -> None:
        group = self._open.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._send(key, group.members))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, key: BatchKey, members: list[Waiting]) -> None:
        live = [m for m in members if not m.future.done()]  # a cancelled caller needs no request
        if not live:
            return
        try:
            if len(live) == 1:
                results = [await self._one(key, live[0])]
            else:
                self.batches_sent += 1
                try:
                    results = await self.client.complete_many(
                        key.url,
                        [m.prompt_ids for m in live],
                        key.params,
                        key.weight_version,
                        key.routed_experts_start,
                        self.retries,
                    )
                except RequestRejected:
                    await asyncio.gather(*(self._send(key, [m]) for m in live))
                    return
            for m, result in zip(live, results):
                if not m.future.done():
                    m.future.set_result(result)
        except BaseException as err:
            error = (
                err
                if isinstance(err, Exception)
                else ServerUnavailable(f"request to {key.url} cancelled: the pool is closing")
            )
            for m in live:
                if not m.future.done():
                    m.future.set_exception(error)
            if not isinstance(err, Exception):
                raise

    async def _one(self, key: BatchKey, m: Waiting) -> Completion:
        return await self.client.complete(
            key.url, m.prompt_ids, key.params, key.weight_version, key.routed_experts_start, m.session_id, self.retries
        )

    async def close(self) -> None:
        """Fail what still waits for its window and cancel what is being sent."""
        for key in list(self._open):
            group = self._open.pop(key)
            if group.timer is not None:
                group.timer.cancel()
            for m in group.members:
                if not m.future.done():
                    m.future.set_exception(ServerUnavailable(f"request to {key.url} not sent: the pool is closing"))
        for task in list(self._sending):
            task.cancel()
        await settle(*self._sending)
