"""Qwen3-Coder's template (tests/chat_models.py) in the agent loop, on the scripted
generator: ChatML turns closed by <|im_end|>, tools listed as XML in the system turn,
calls in its XML syntax (inference.tool_format = 'qwen3_coder'), no thinking switch.

Checked: the ids of a tool-calling episode are the template's fresh rendering of the
conversation with the tools, each request extending the previous one; the calls the
format writes are what the template writes for an assistant message's `tool_calls`;
a text action is no call; thinking is refused; the tiny model is a Qwen3-MoE whose
generation config stops at <|im_end|>."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.model.chat_format import TOOL_CALL_SYSTEM_PROMPT, ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import InvalidAction, parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
from engines.tool_formats import tool_format
from tests.chat_models import build_chat_model, chat_tokenizer, chat_tokenizer_dir
from tests.engines.inference.family_episode import ACTIONS, assert_token_exact, fresh_render, model_turns, run_episode

pytestmark = pytest.mark.chat_template

CALLS = [render_tool_call(parse_action(a), "qwen3_coder") for a in ACTIONS]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def coder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("qwen3_coder", tmp_path_factory.mktemp("qwen3_coder"))


def test_a_tool_calling_episode_is_the_templates_fresh_rendering_with_the_tools(coder_dir: Path) -> None:
    run = run_episode(coder_dir, CALLS, "<|im_end|>", tool_format="qwen3_coder")
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    end = run.agent.chat.end_id
    assert model_turns(run) == [run.agent.encode(c) + [end] for c in CALLS]
    prompt = run.agent.decode(run.episode.prompt_ids)
    assert prompt.startswith(f"<|im_start|>system\n{TOOL_CALL_SYSTEM_PROMPT}\n\n# Tools\n")
    assert "<function>\n<name>submit</name>" in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\n<tool_response>\nturn 1: ok\n</tool_response>\n<|im_end|>\n" in run.episode.conversation
    # The template closes the last turn with a newline the model never wrote.
    assert run.agent.encode(fresh_render(run, TOOL_SCHEMAS)) == run.ids + run.agent.encode("\n")


def test_the_formats_calls_are_what_the_template_writes_for_tool_calls() -> None:
    tok = chat_tokenizer("qwen3_coder")
    user = {"role": "user", "content": "fix add"}
    for calls in ([("view", {"path": "m.py", "start": 1, "end": 9})], [("undo", {}), ("bash", {"command": "ls"})]):
        structured = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
        as_fields = [user, {"role": "assistant", "content": "", "tool_calls": structured}]
        as_content = [user, {"role": "assistant", "content": tool_format("qwen3_coder").render(calls)}]
        assert tok.apply_chat_template(as_fields, tokenize=False) == tok.apply_chat_template(as_content, tokenize=False)


def test_a_text_action_is_no_call_and_thinking_is_refused(coder_dir: Path) -> None:
    run = run_episode(coder_dir, [CALLS[0], "view m.py", CALLS[2]], "<|im_end|>", tool_format="qwen3_coder")
    assert_token_exact(run)
    assert run.env.actions == [ACTIONS[0], ACTIONS[2]] and isinstance(run.agent.turn_action("submit"), InvalidAction)
    assert "error: no tool call; answer with <tool_call>\n<function=view>" in run.episode.conversation
    with pytest.raises(ValueError, match="has no thinking switch"):
        ChatFormat.from_tokenizer(run.agent.tok, coder_dir, thinking="on")


def test_the_tiny_model_is_a_qwen3_moe_that_stops_at_the_end_of_its_turn(tmp_path: Path) -> None:
    model_dir = build_chat_model("qwen3_coder", tmp_path / "m")
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "qwen3_moe"
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir, tools=TOOL_SCHEMAS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    assert chat.end_id == ids["<|im_end|>"] and set(chat.stop_ids) == set(ids.values()) and chat.extra_stop_ids == ()
