"""Multi-turn episodes on the vLLM CPU build with models of two template families
(tests/chat_models.py): ChatML on a Qwen3-MoE, Llama-3 headers on a Mixtral. One
server per family, shared by the module's tests.

Checked: each turn's request extends the previous one by exactly the completion and
observation ids; the ids decode to the template's rendering of the conversation; the
served logprobs equal transformers' on the same files within 1e-3; generation stops
at the template's end-of-turn token (for the Llama-3 family the server learns it only
from the chat format's stop ids); with native tool calls the prompt lists the tools, a
call reaches the environment as its text action and a malformed one is answered with
the error, ids exact throughout."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.inference.server_pool import ServerPool
from engines.model.chat_format import TOOL_CALL_SYSTEM_PROMPT, ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import Action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
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


def config(model_dir: Path, max_total_tokens: int = 480, **overrides: Any) -> Any:
    """The suite's small server, within the test models' 1024 positions."""
    limits = {"max_turns": 4, "max_total_tokens": max_total_tokens, "wall_seconds": 120}
    return small_config(model_dir, max_model_len=1024, limits=limits, **overrides)


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


def test_native_tool_calls_are_read_by_the_loop_with_the_ids_exact(served: tuple) -> None:
    name, model_dir, pool, loop = served
    if name == "llama3":  # its template has no tools section
        with pytest.raises(ValueError, match="never references `tools`"):
            config(model_dir, tool_format="hermes")
        return
    cfg = config(model_dir, max_total_tokens=1000, tool_format="hermes")
    tok = load_tokenizer(model_dir)
    end = tok.convert_tokens_to_ids(FAMILIES[name].end_of_turn)
    plain = [i for i in range(len(tok)) if i not in tok.all_special_ids] + [end]  # no template token mid-turn
    agent = AgentLoop(RecordingPool(pool), tok, cfg, allowed_token_ids=plain)  # type: ignore[arg-type]
    envs = [EchoEnv() for _ in range(2)]
    reqs = [EpisodeRequest("t", "g", i, lambda e=e: e, seed=3 + i) for i, e in enumerate(envs)]
    eps = loop.run_until_complete(agent.run_episodes(reqs))
    chat = agent.chat
    for ep, env in zip(eps, envs):
        # A random model writes no valid call: every turn is answered with the error, no step taken.
        assert ep.finish_reason in ("max_turns", "max_tokens") and ep.num_turns >= 2, ep.infra_message
        assert env.actions == []
        tool_turns = [m for m in ep.messages if m["role"] == "tool"]
        assert tool_turns and all(m["content"].startswith("error: no tool call") for m in tool_turns)
        assert tok.decode(ep.prompt_ids + ep.completion_ids, skip_special_tokens=False) == ep.conversation
        rendered = tok.apply_chat_template(ep.messages, tools=TOOL_SCHEMAS, tokenize=False)
        assert '"name": "submit"' in ep.conversation and rendered.startswith(
            ep.conversation.rsplit("<|im_start|>", 1)[0]
        )
    # A well-formed call reaches the environment as the text action it stands for.
    env = EchoEnv()
    call = render_tool_call(Action("edit", path="m.py", line=2, body="    return a + b"))
    result = loop.run_until_complete(agent._step(env, call, after_observation=False))
    assert env.actions == ["edit m.py 2\n    return a + b"] and result.observation == env.observations[0]
    assert chat.system_prompt == TOOL_CALL_SYSTEM_PROMPT
