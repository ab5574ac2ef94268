"""The multi-turn agent loop: token-exact episodes against any `EpisodeEnv`.

The conversation is kept as token ids, never re-tokenised, framed by the model's own
chat template (engines/model/chat_format.py):

    prompt_ids      = the template's [system?, user: PROBLEM] + generation prompt
    per model turn  : the server's sampled ids as-is (ending at the template's
                      end-of-turn id when the model stopped), loss_mask True, the
                      server's logprobs
    per observation : the template's continuation after that turn (its end-of-turn
                      tail, the tool message, the next generation prompt), tokenised
                      alone; loss_mask False, logprob 0.0. A turn cut by length is
                      closed there, with the end token.

so each turn's prompt is the previous prompt + completion ids exactly, and
`decode(prompt_ids + completion_ids)` is the template's rendering of the
conversation. With the tiny tokenizer that is
`<|user|>PROBLEM<|end|><|assistant|>ACTION<|end|><|tool|>OBSERVATION<|end|><|assistant|>...`.

Owns: turn, token and wall-time limits, a finish reason for every episode, the bound
on concurrent episodes, and turning failures into marked episodes. Parsing text
actions and executing them belong to the environment (malformed text becomes an error
observation there). With `inference.tool_format` naming a family's format (hermes,
glm45, qwen3_coder, ...) the template lists the tools and each turn's tool call is read
here in that format (engines/tool_calls.py) and handed on as
its text action; a malformed call becomes the error observation without a step.
A thinking model's turn is `<think>REASONING</think>ACTION`: the whole turn stays in the
ids, the loss mask and the logprobs as sampled, and only ACTION is an action; reasoning
never closed is answered with an error observation, without a step (`turn_action`).
Observations are rendered in the role the template renders them in (`tool`, or `user`
where it has no tool role: ChatFormat.observation_role), and that role is what the
episode's messages record. Environment methods block: they run in threads.

Invariant: every requested episode comes back, either finished by the model or the
limits, or marked with finish_reason "error" and a message (infra_failure when a
server or the environment failed rather than the input).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from transformers import PreTrainedTokenizerBase

from engines.inference.client import RequestRejected, ServerUnavailable
from engines.inference.config import InferenceConfig
from engines.inference.types import Episode, EpisodeEnv, FinishReason, Generator, Observation, SamplingParams
from engines.model.chat_format import ChatFormat, Message
from engines.protocol import InvalidAction, parse_action
from engines.tool_calls import TOOL_SCHEMAS, protocol_text

log = logging.getLogger(__name__)

TRUNCATED = "\n[... output truncated]"


@dataclass(frozen=True)
class Refused:
    """The observation of a malformed tool call (an `Observation` the environment never made)."""

    observation: str
    done: bool = False


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to run: which task, which sample of its group, how to make its env."""

    task_id: str
    group_id: str
    sample_index: int
    make_env: Callable[[], EpisodeEnv]  # blocking; called in a thread when the episode starts
    seed: int | None = None  # turn t samples with seed + t; None: unseeded


class AgentLoop:
    """Runs episodes on a generator (a server pool) with the limits and sampling of `cfg`."""

    def __init__(
        self,
        pool: Generator,
        tokenizer: PreTrainedTokenizerBase,
        cfg: InferenceConfig,
        allowed_token_ids: Sequence[int] | None = None,
        chat: ChatFormat | None = None,
    ) -> None:
        self.pool = pool
        self.tok = tokenizer
        self.cfg = cfg
        self.limits = cfg.limits
        # The served model's framing; its generation config (eos ids) sits beside the weights.
        tools = TOOL_SCHEMAS if cfg.tool_format != "text" else None
        self.chat = chat or ChatFormat.from_tokenizer(
            tokenizer, cfg.model_dir or None, tools=tools, thinking=cfg.thinking
        )
        self.allowed_token_ids = tuple(allowed_token_ids) if allowed_token_ids is not None else None
        # One thread per episode in flight: environment calls block (a `test` waits for a
        # grading sandbox), and asyncio's default pool (cores + 4 threads) let a few
        # blocked test calls hold every other episode's view, edit and prompt back.
        # Threads start on demand; an idle one costs only its stack.
        self._threads = ThreadPoolExecutor(self.limits.max_concurrent_episodes, thread_name_prefix="episode-env")

    async def _in_thread(self, fn: Callable, *args: object):
        """`fn(*args)` on the loop's own threads (asyncio.to_thread with a pool of ours)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    async def run_episodes(
        self, requests: Sequence[EpisodeRequest], on_done: Callable[[Episode], None] | None = None
    ) -> list[Episode]:
        """Run all requests, at most `limits.max_concurrent_episodes` at a time; results in order.
        `on_done` is called with each episode as it finishes (for progress lines)."""
        bound = asyncio.Semaphore(self.limits.max_concurrent_episodes)

        async def one(req: EpisodeRequest) -> Episode:
            async with bound:
                episode = await self.run_episode(req)
            if on_done is not None:
                on_done(episode)
            return episode

        return list(await asyncio.gather(*(one(r) for r in requests)))

    async def run_episode(self, req: EpisodeRequest) -> Episode:
        ep = Episode(
            task_id=req.task_id, group_id=req.group_id, sample_index=req.sample_index, started_at=datetime.now(UTC)
        )
        session = f"{req.task_id}/{req.group_id}/{req.sample_index}/{uuid.uuid4().hex[:8]}"
        env: EpisodeEnv | None = None
        routes: list[np.ndarray] = []
        try:
            async with asyncio.timeout(self.limits.wall_seconds):
                env = await self._in_thread(req.make_env)
                ep.finish_reason = await self._turns(ep, env, req, session, routes)
        except TimeoutError:
            ep.finish_reason = "timeout"
        except ServerUnavailable as err:
            self._fail(ep, f"episode {session}: inference failed: {err}", infra=True)
        except RequestRejected as err:
            self._fail(ep, f"episode {session}: {err}", infra=False)
        except Exception as err:  # the environment failed: mark, never drop
            self._fail(
                ep, f"episode {session}: environment error: {err!r}\n{traceback.format_exc(limit=5)}", infra=True
            )
        finally:
            self.pool.release_session(session)
            await self._finish(ep, env, routes)
        return ep

    async def _turns(
        self, ep: Episode, env: EpisodeEnv, req: EpisodeRequest, session: str, routes: list[np.ndarray]
    ) -> FinishReason:
        problem = await self._in_thread(env.prompt)
        messages: list[Message] = self.chat.first_messages(problem)
        ep.messages = messages  # grows with the episode below
        ep.prompt_ids = self.chat.prompt_ids(messages)
        if len(ep.prompt_ids) >= self.limits.max_total_tokens:
            raise RequestRejected(
                f"prompt of task {req.task_id} has {len(ep.prompt_ids)} tokens; limits.max_total_tokens is "
                f"{self.limits.max_total_tokens}: shorten the task or raise the limit"
            )
        capture = self.cfg.cluster.routed_expert_capture
        while True:
            if ep.num_turns >= self.limits.max_turns:
                return "max_turns"
            context = ep.prompt_ids + ep.completion_ids
            budget = self.limits.max_total_tokens - len(context)
            if budget <= 0:
                return "max_tokens"
            params = self._params(min(self.cfg.sampling.max_tokens_per_turn, budget), req.seed, ep.num_turns)
            covered = sum(r.shape[0] for r in routes)  # positions whose routes are already recorded
            t0 = time.monotonic()
            turn = await self.pool.generate(context, params, session, routed_experts_start=covered if capture else None)
            ep.generation_s += time.monotonic() - t0
            ep.completion_ids += turn.token_ids
            ep.loss_mask += [True] * len(turn.token_ids)
            ep.completion_logprobs += turn.logprobs
            ep.policy_versions.append(turn.weight_version)
            ep.num_turns += 1
            if turn.routed_experts is not None:
                routes.append(turn.routed_experts)
            closed_by = turn.token_ids[-1] if turn.token_ids and turn.token_ids[-1] in self.chat.stop_ids else None
            action = self.decode(turn.token_ids[:-1] if closed_by is not None else turn.token_ids)
            messages.append({"role": "assistant", "content": action})
            result = await self._step(env, action, after_observation=ep.num_turns > 1)
            if result.done:
                return "submitted"
            tool_message = {"role": self.chat.observation_role, "content": self._cut(result.observation)}
            observation = self.chat.continuation_ids(messages, [tool_message], closed_by)
            messages.append(tool_message)
            if len(ep.prompt_ids) + len(ep.completion_ids) + len(observation) >= self.limits.max_total_tokens:
                return "max_tokens"
            ep.completion_ids += observation
            ep.loss_mask += [False] * len(observation)
            ep.completion_logprobs += [0.0] * len(observation)

    async def _step(self, env: EpisodeEnv, text: str, after_observation: bool) -> Observation:
        """The environment's answer to a model turn: its action part (reasoning set aside)
        as text, a tool call as the text action it stands for. Malformed text goes to the
        environment, which answers it; a malformed call or unclosed reasoning is answered
        here, without a step."""
        _, action_text = self.chat.split_turn(text, after_observation)
        if action_text is None:
            return Refused(f"error: {self.chat.no_action_reason(text)}")
        if self.cfg.tool_format == "text":
            return await self._in_thread(env.step, action_text)
        action = protocol_text(action_text, self.cfg.tool_format)
        if isinstance(action, InvalidAction):
            return Refused(f"error: {action.message}")
        return await self._in_thread(env.step, action)

    def turn_action(self, text: str, after_observation: bool = False) -> str | InvalidAction:
        """The text action (engines/protocol.py) a model turn stands for in this loop's
        format and template, or why it is none: what counts as a valid action. Every turn
        but an episode's first follows an observation (ChatFormat.split_turn)."""
        _, action_text = self.chat.split_turn(text, after_observation)
        if action_text is None:
            return InvalidAction(self.chat.no_action_reason(text))
        if self.cfg.tool_format != "text":
            return protocol_text(action_text, self.cfg.tool_format)
        parsed = parse_action(action_text)
        return parsed if isinstance(parsed, InvalidAction) else action_text

    def valid_actions(self, messages: Sequence[Message]) -> int:
        """How many of an episode's model turns were valid actions (a step where none
        was is a step the policy learns nothing from: engines/rollout/step.py warns)."""
        turns = [str(m.get("content") or "") for m in messages if m.get("role") == "assistant"]
        return sum(not isinstance(self.turn_action(t, k > 0), InvalidAction) for k, t in enumerate(turns))

    def _params(self, max_tokens: int, seed: int | None, turn: int) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            seed=None if seed is None else seed + turn,
            stop_token_ids=self.chat.extra_stop_ids,
            allowed_token_ids=self.allowed_token_ids,
        )

    def _cut(self, observation: str) -> str:
        """The observation cut (head kept) to `limits.observation_tokens()` tokens."""
        text = observation
        while len(self.encode(text)) > self.limits.observation_tokens():
            keep = max(0, int(len(text) * 0.8) - len(TRUNCATED))
            text = observation[:keep] + TRUNCATED
        return text

    @staticmethod
    def _fail(ep: Episode, message: str, infra: bool) -> None:
        log.warning(message)
        ep.finish_reason = "error"
        ep.infra_failure = infra
        ep.infra_message = message

    async def _finish(self, ep: Episode, env: EpisodeEnv | None, routes: list[np.ndarray]) -> None:
        if env is not None:
            try:
                if not ep.infra_failure:
                    ep.patch = await self._in_thread(env.patch)
            except Exception as err:
                self._fail(ep, f"episode {ep.task_id}/{ep.sample_index}: reading the patch failed: {err!r}", infra=True)
            finally:
                try:
                    await self._in_thread(env.close)
                except Exception:
                    log.exception("closing the environment of %s/%d failed", ep.task_id, ep.sample_index)
        if routes:
            ep.routed_experts = np.concatenate(routes, axis=0)
        ep.conversation = self.decode(ep.prompt_ids + ep.completion_ids)
        ep.finished_at = datetime.now(UTC)
