"""The agent loop with a thinking model's template (Qwen3's, tests/chat_models.py) and
with a template that has no tool role (OLMoE-Instruct's), on the scripted generator:
no server, no sandbox.

Checked: with thinking on, each turn's `<think>...</think>` stays in the ids, the loss
mask and the logprobs exactly as sampled while only the action after it reaches the
environment, and reasoning never closed is answered with an error observation, not a
crash; with thinking off, every generation prompt carries Qwen3's closed empty block;
either way each request extends the previous one exactly, although the template
renders the same conversation differently when it is re-rendered. A template without a
tool role gets every observation as a user turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engines.inference.agent import AgentLoop, EpisodeRequest
from engines.model.chat_format import UNCLOSED_REASONING
from engines.protocol import Action, InvalidAction
from engines.tool_calls import render_tool_call
from tests.chat_models import chat_tokenizer
from tests.engines.inference.conftest import small_config
from tests.engines.inference.family_episode import ACTIONS, EchoEnv
from tests.engines.inference.scripted_generator import ScriptedGenerator, turn_logprob

pytestmark = pytest.mark.chat_template

THINKING = [
    "<think>\nthe test fails: look at add\n</think>\n\nview m.py",
    "<think>add subtracts</think>edit m.py 2\n    return a + b",  # Qwen3 re-renders this one with newlines
    "<think>\nstill weighing it",  # never closed: no action
    "<think>\ndone\n</think>\n\nsubmit",
]


def model_dir(name: str, out: Path) -> Path:
    chat_tokenizer(name).save_pretrained(out)
    return out


def episode(name: str, out: Path, script: list[str], **config: Any) -> tuple[Any, EchoEnv, list[list[int]], AgentLoop]:
    """One episode of `script`'s turns, each closed by the template's end token."""
    folder = model_dir(name, out)
    tok = chat_tokenizer(name)
    # Room for Qwen3's tools section (about 900 tokens of this small vocabulary); no server reads max_model_len.
    limits = {"max_turns": 6, "max_total_tokens": 2048}
    cfg = small_config(folder, max_model_len=2048, sampling={"max_tokens_per_turn": 128}, limits=limits, **config)
    generator = ScriptedGenerator(tok, {"t": script}, stop_id=tok.convert_tokens_to_ids(tok.eos_token))
    agent = AgentLoop(generator, tok, cfg)
    env = EchoEnv()
    (ep,) = asyncio.run(agent.run_episodes([EpisodeRequest("t", "g", 0, lambda: env)]))
    (prompts,) = generator.prompts.values()
    return ep, env, prompts, agent


def model_turns(ep: Any) -> list[tuple[list[int], list[float]]]:
    """The runs of loss-masked ids of an episode, with their logprobs."""
    turns, start = [], None
    for i, m in enumerate([*ep.loss_mask, False]):
        if m and start is None:
            start = i
        if not m and start is not None:
            turns.append((ep.completion_ids[start:i], ep.completion_logprobs[start:i]))
            start = None
    return turns


def assert_token_exact(ep: Any, prompts: list[list[int]], agent: AgentLoop) -> None:
    context = ep.prompt_ids + ep.completion_ids
    assert prompts[0] == ep.prompt_ids and all(context[: len(p)] == p for p in prompts)
    assert sorted(map(len, prompts)) == list(map(len, prompts))
    assert agent.decode(context) == ep.conversation


def test_with_thinking_on_the_reasoning_is_trained_as_sampled_and_only_the_action_is_parsed(tmp_path: Path) -> None:
    ep, env, prompts, agent = episode("qwen3", tmp_path / "m", THINKING, thinking="on")
    assert ep.finish_reason == "submitted" and ep.num_turns == 4 and not ep.infra_failure, ep.infra_message
    assert env.actions == ACTIONS  # the reasoning never reached the environment
    observations = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert observations == ["turn 1: ok", "turn 2: ok", f"error: {UNCLOSED_REASONING}"]
    # Every model turn, reasoning included, is in the ids, the loss and the logprobs as the generator sampled it.
    end = agent.chat.end_id
    turns = model_turns(ep)
    assert [ids for ids, _ in turns] == [agent.encode(text) + [end] for text in THINKING]
    assert all(lps == [turn_logprob(k + 1, i) for i in range(len(lps))] for k, (_, lps) in enumerate(turns))
    assert_token_exact(ep, prompts, agent)
    # Qwen3's template, re-rendering the conversation, writes the second turn's reasoning
    # otherwise; the ids already sent keep it as sampled.
    rerendered = agent.tok.apply_chat_template(ep.messages, tokenize=False, enable_thinking=True)
    assert "<think>add subtracts</think>edit m.py 2" in ep.conversation
    assert "<think>add subtracts</think>" not in rerendered and "<think>\nadd subtracts\n</think>\n\nedit" in rerendered
    assert agent.valid_actions(ep.messages) == 3


def test_with_thinking_off_every_generation_prompt_closes_an_empty_block(tmp_path: Path) -> None:
    ep, env, prompts, agent = episode("qwen3", tmp_path / "m", ACTIONS, thinking="off")
    assert ep.finish_reason == "submitted" and ep.num_turns == 3 and env.actions == ACTIONS
    assert ep.conversation.count("<|im_start|>assistant\n<think>\n\n</think>\n\n") == 3
    assert [ids for ids, _ in model_turns(ep)] == [agent.encode(a) + [agent.chat.end_id] for a in ACTIONS]
    assert_token_exact(ep, prompts, agent)
    # Re-rendered, earlier turns lose the empty block their prompt carried; the ids do not.
    rerendered = agent.tok.apply_chat_template(ep.messages, tokenize=False, enable_thinking=False)
    assert "<|im_start|>assistant\nview m.py<|im_end|>" in rerendered
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\nview m.py<|im_end|>" in ep.conversation


def test_a_tool_call_after_reasoning_reaches_the_environment_as_its_text_action(tmp_path: Path) -> None:
    calls = [
        render_tool_call(Action("edit", path="m.py", line=2, body="    return a + b")),
        render_tool_call(Action("submit")),
    ]
    script = [f"<think>\nplan {i}\n</think>\n\n{c}" for i, c in enumerate(calls)]
    ep, env, prompts, agent = episode("qwen3", tmp_path / "m", script, tool_format="hermes")
    assert ep.finish_reason == "submitted" and env.actions == ["edit m.py 2\n    return a + b", "submit"]
    assert_token_exact(ep, prompts, agent)
    assert agent.valid_actions(ep.messages) == 2
    assert isinstance(agent.turn_action("<think>\nplan"), InvalidAction)
    assert isinstance(agent.turn_action("view m.py"), InvalidAction)  # a text action is no tool call


def test_a_template_without_a_tool_role_gets_every_observation_as_a_user_turn(tmp_path: Path) -> None:
    ep, env, prompts, agent = episode("olmoe", tmp_path / "m", ACTIONS)
    assert ep.finish_reason == "submitted" and env.actions == ACTIONS and agent.chat.observation_role == "user"
    assert [m["role"] for m in ep.messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert all(f"<|user|>\nturn {k}: ok\n<|assistant|>\n" in ep.conversation for k in (1, 2))
    assert_token_exact(ep, prompts, agent)
    assert agent.tok.apply_chat_template(ep.messages, tokenize=False) == ep.conversation
