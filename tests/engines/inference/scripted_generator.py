"""A deterministic in-process `Generator` for tests of the agent loop's own logic (turn
framing, token exactness, limits), where vLLM itself is not what is tested.

Each session's turns are the next texts of its task's script, tokenized by the model's
tokenizer and closed by a stop id, as a server's sampled turn is (a script entry may be
`(text, stop_id)`, a stop of its own, or `(text, None)`, a turn cut by length); each
token gets a logprob unique to its turn and position, so where the loop puts them is
checkable. Every request's prompt is recorded per session."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from engines.inference.types import Completion, SamplingParams

URL = "scripted://"


Turn = str | tuple[str, int | None]  # a text, closed by the generator's stop id or the one given (None: none)


class ScriptedGenerator:
    def __init__(self, tokenizer: Any, scripts: dict[str, Sequence[Turn]], stop_id: int, version: int = 0) -> None:
        self.tok, self.scripts, self.stop_id, self.version = tokenizer, scripts, stop_id, version
        self.prompts: dict[str, list[list[int]]] = defaultdict(list)  # session -> each request's prompt
        self.released: set[str] = set()

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        session_id: str | None = None,
        routed_experts_start: int | None = None,
    ) -> Completion:
        assert session_id is not None, "the agent loop names every episode's session"
        turns = self.prompts[session_id]
        turns.append(list(prompt_ids))
        script = self.scripts[session_id.split("/", 1)[0]]  # sessions are "task/group/sample/nonce"
        turn = script[min(len(turns), len(script)) - 1]  # the last text again once the script is out
        text, stop = turn if isinstance(turn, tuple) else (turn, self.stop_id)
        ids = self.tok.encode(text, add_special_tokens=False) + ([] if stop is None else [stop])
        finish = "stop" if stop is not None else "length"
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
        await asyncio.sleep(0)  # a real await: episodes interleave as they do on a server
        return Completion(ids, [turn_logprob(len(turns), i) for i in range(len(ids))], finish, self.version, URL)

    def release_session(self, session_id: str) -> None:
        self.released.add(session_id)


def turn_logprob(turn: int, position: int) -> float:
    """The logprob the generator gives token `position` of turn `turn` (1-based)."""
    return -(turn + position / 1000)
