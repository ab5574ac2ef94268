"""Plain data exchanged by the inference engine: sampling parameters, one completion,
one episode, the `EpisodeEnv` protocol the agent loop drives and the `Generator`
protocol it samples from.

Data only; no I/O. The environment implementation lives elsewhere
(`engines.env.session.EnvSession`); this package only relies on the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

import numpy as np

FinishReason = Literal["submitted", "max_turns", "max_tokens", "timeout", "error"]
KvRole = Literal["kv_producer", "kv_consumer"]  # a prefill (producer) or decode (consumer) server's KV role


class Observation(Protocol):
    """What the agent reads of an environment step's result (engines/env/types.py
    StepResult has these and more)."""

    observation: str
    done: bool


class EpisodeEnv(Protocol):
    """One episode's environment. Methods block (sandboxed processes): the agent calls
    them through `asyncio.to_thread`."""

    def prompt(self) -> str: ...

    def step(self, action_text: str) -> Observation: ...

    def patch(self) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SamplingParams:
    """Sampling of one request (vLLM /v1/completions fields of the same names)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None  # restrict the vocabulary (tests, constrained turns)
    ignore_eos: bool = False  # generate max_tokens whatever is sampled (benchmarks)


@dataclass
class Completion:
    """One model turn as the server produced it."""

    token_ids: list[int]  # sampled ids, the eos token included when the turn ended on it
    logprobs: list[float]  # log p(token) under the server's policy, one per token id
    finish_reason: str  # vLLM's: "stop" (eos / stop id) or "length"
    weight_version: int  # version the serving weights had when the request was sent (oldest that produced a token)
    server_url: str
    routed_experts: np.ndarray | None = (
        None  # [positions, layers, top_k] from routed_experts_prompt_start on, when enabled
    )


class Generator(Protocol):
    """What the agent loop samples its turns from: `ServerPool` (vLLM servers), or any
    other sampler that keeps a session's turns on one model (tests use an in-process one)."""

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        session_id: str | None = None,
        routed_experts_start: int | None = None,
    ) -> Completion: ...

    def release_session(self, session_id: str) -> None: ...


@dataclass
class Episode:
    """One multi-turn episode, token-exact.

    `prompt_ids + completion_ids` is the whole conversation as the model saw it. In
    `completion_ids` the model's sampled tokens have loss_mask True and their
    inference logprob; observation tokens (tool turns) have loss_mask False and
    logprob 0.0.
    """

    task_id: str
    group_id: str
    sample_index: int
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[bool] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)  # one per model turn
    num_turns: int = 0
    finish_reason: FinishReason = "error"
    generation_s: float = 0.0  # seconds spent waiting for the servers
    started_at: datetime | None = None  # UTC
    finished_at: datetime | None = None  # UTC
    conversation: str = ""  # decode(prompt_ids + completion_ids), special tokens kept
    # The same conversation as chat messages (role, content), whatever the chat template.
    messages: list[dict[str, str]] = field(default_factory=list)
    patch: str = ""
    infra_failure: bool = False  # a server or the environment failed, not the model
    infra_message: str = ""  # why the episode ended in "error" (infrastructure or bad input)
    routed_experts: np.ndarray | None = None  # [prompt+completion tokens - 1, layers, top_k] when captured

    @property
    def min_policy_version(self) -> int | None:
        """Oldest policy version that produced any completion token (staleness checks)."""
        return min(self.policy_versions) if self.policy_versions else None
