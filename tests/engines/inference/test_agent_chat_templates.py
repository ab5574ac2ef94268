"""Multi-turn episodes on the vLLM CPU build with models of two template families
(tests/chat_models.py): ChatML on a Qwen3-MoE, Llama-3 headers on a Mixtral. One
server per family, shared by the module's tests.

Checked: each turn's request extends the previous one by exactly the completion and
observation ids; the ids decode to the template's rendering of the conversation; the
served logprobs equal transformers' on the same files within 1e-3; generation stops
at the template's end-of-turn token (for the Llama-3 family the server learns it only
from the chat format's stop ids)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.inference.server_pool import ServerPool
from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from tests.chat_models import FAMILIES, build_chat_model
from tests.engines.inference.conftest import small_config
from tests.engines.trainer.vllm_serving import transformers_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.chat_template]


@dataclass
class Step:
    observation: str
    done: bool


class EchoEnv:
    """Test environment: submits after 3 turns; records what it was sent and answered."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.observations: list[str] = []

    def prompt(self) -> str:
        return "fix add in m.py"

    def step(self, action_text: str) -> Step:
        self.actions.append(action_text)
        self.observations.append(f"turn {len(self.actions)}: {len(action_text)} chars")
        return Step(self.observations[-1], len(self.actions) >= 3)

    def patch(self) -> str:
        return ""

    def close(self) -> None:
        pass


class RecordingPool:
    """The real pool, with every request's prompt ids kept (to check how turns grow)."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool, self.sent = pool, []

    async def generate(self, context: list[int], *args: Any, **kwargs: Any) -> Any:
        self.sent.append(list(context))
        return await self.pool.generate(context, *args, **kwargs)

    def release_session(self, session: str) -> None:
        self.pool.release_session(session)


def config(model_dir: Path) -> Any:
    """The suite's small server, within the test models' 512 positions."""
    limits = {"max_turns": 4, "max_total_tokens": 480, "wall_seconds": 120}
    return small_config(model_dir, max_model_len=512, limits=limits)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vllm_available: str) -> Iterator:
    name = request.param
    model_dir = build_chat_model(name, tmp_path_factory.mktemp(name))
    loop = asyncio.new_event_loop()
    pool = ServerPool(config(model_dir))
    loop.run_until_complete(pool.start())
    try:
        yield name, model_dir, pool, loop
    finally:
        loop.run_until_complete(pool.close())
        loop.close()


def episodes(served: tuple, allowed: list[str] | None, count: int = 3) -> tuple[list, list[EchoEnv], Any, Any]:
    name, model_dir, pool, loop = served
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir)
    ids = None if allowed is None else [tok.convert_tokens_to_ids(t) for t in allowed] + [chat.end_id]
    recorder = RecordingPool(pool)
    agent = AgentLoop(recorder, tok, config(model_dir), allowed_token_ids=ids)  # type: ignore[arg-type]
    envs = [EchoEnv() for _ in range(count)]
    reqs = [EpisodeRequest("t", "g", i, lambda e=e: e, seed=7 + i) for i, e in enumerate(envs)]
    eps = loop.run_until_complete(agent.run_episodes(reqs))
    return eps, envs, recorder, chat


def test_turns_are_token_exact_and_decode_to_the_templates_rendering(served: tuple) -> None:
    eps, envs, recorder, chat = episodes(served, allowed=["Q", "Z", "x"])
    tok = chat.tokenizer
    for ep, env in zip(eps, envs):
        assert ep.finish_reason == "submitted" and ep.num_turns == 3, ep.infra_message
        assert ep.prompt_ids == chat.prompt_ids(chat.first_messages(env.prompt()))
        ids = ep.prompt_ids + ep.completion_ids
        assert tok.decode(ids, skip_special_tokens=False) == ep.conversation
        messages = chat.first_messages(env.prompt())
        for action, observation in zip(env.actions, env.observations):
            messages += [{"role": "assistant", "content": action}, {"role": "tool", "content": observation}]
        rendered = tok.apply_chat_template(messages[:-1], tokenize=False)
        end = FAMILIES[served[0]].end_of_turn
        assert rendered.startswith(ep.conversation) and rendered[len(ep.conversation) :] in {"", "\n", end, end + "\n"}
    # Every request's prompt is a prefix of its episode's final ids: turns were only ever appended.
    wholes = [ep.prompt_ids + ep.completion_ids for ep in eps]
    assert len(recorder.sent) == sum(ep.num_turns for ep in eps)
    assert all(any(w[: len(r)] == r for w in wholes) for r in recorder.sent)


def test_generation_stops_at_the_templates_end_token(served: tuple) -> None:
    eps, _, _, chat = episodes(served, allowed=["Q", "Z"])
    turns = 0
    for ep in eps:
        start = 0
        for i, model in enumerate([*ep.loss_mask, False]):
            if not model:
                if i > start:
                    turn = ep.completion_ids[start:i]
                    turns += 1
                    assert chat.end_id not in turn[:-1]  # nothing after the end token
                    assert turn[-1] == chat.end_id or len(turn) == 32, turn
                start = i + 1
    closed = sum(ep.completion_ids.count(chat.end_id) for ep in eps)
    assert turns >= 6 and closed >= turns // 2  # with 1 in 3 ids an end token, most turns close themselves


def test_served_logprobs_equal_the_trainers(served: tuple) -> None:
    eps, _, _, _ = episodes(served, allowed=None, count=2)
    model_dir = str(served[1])
    for ep in eps:
        ref = transformers_logprobs(model_dir, ep.prompt_ids, ep.completion_ids)
        pairs = [(a, b) for a, b, m in zip(ep.completion_logprobs, ref, ep.loss_mask) if m]
        assert len(pairs) >= 3
        assert max(abs(a - b) for a, b in pairs) < 1e-3, pairs
