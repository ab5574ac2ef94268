"""Kimi-K2's template (tests/chat_models.py) in the agent loop, on the scripted
generator: <|im_user|>/<|im_assistant|>/<|im_system|> headers, <|im_end|> closing every
turn (the eos of the model's generation config, not of its tokenizer), tool results as a
<|im_system|>tool turn, calls in <|tool_calls_section_begin|> (tool_format 'kimi_k2').

Checked: with text actions and with calls (the tools declared in their own first turn)
the ids are the template's fresh rendering of the conversation, each request extending
the previous one; the calls the format writes are what the template writes for an
assistant message's `tool_calls`; thinking is refused; the tiny model is a DeepSeek-V3
(Kimi-K2's architecture) that stops at <|im_end|> and its tokenizer's [EOS]."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
from engines.tool_formats import tool_format
from tests.chat_models import build_chat_model, chat_tokenizer, chat_tokenizer_dir
from tests.engines.inference.family_episode import ACTIONS, assert_token_exact, fresh_render, model_turns, run_episode

pytestmark = pytest.mark.chat_template

END = "<|im_end|>"


@pytest.fixture(scope="module")
def kimi_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("kimi_k2", tmp_path_factory.mktemp("kimi_k2"))


def test_text_actions_are_the_templates_fresh_rendering(kimi_dir: Path) -> None:
    run = run_episode(kimi_dir, ACTIONS, END)
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.chat.observation_role == "tool"
    assert model_turns(run) == [run.agent.encode(a) + [run.agent.chat.end_id] for a in ACTIONS]
    prompt = run.agent.decode(run.episode.prompt_ids)
    assert prompt.startswith("<|im_system|>system<|im_middle|>You fix a bug")
    assert prompt.endswith(
        "<|im_user|>user<|im_middle|>fix add in m.py<|im_end|><|im_assistant|>assistant<|im_middle|>"
    )
    # Tool results name the call they answer; this project's observations carry no call id.
    assert f"view m.py{END}<|im_system|>tool<|im_middle|>## Return of \n    turn 1: ok{END}" in run.episode.conversation
    assert run.ids == run.agent.encode(fresh_render(run))


def test_calls_in_its_syntax_with_the_declared_tools_are_the_fresh_rendering(kimi_dir: Path) -> None:
    calls = [render_tool_call(parse_action(a), "kimi_k2") for a in ACTIONS]  # type: ignore[arg-type]
    run = run_episode(kimi_dir, calls, END, tool_format="kimi_k2")
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    assert run.agent.decode(run.episode.prompt_ids).startswith(
        "<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  [{"
    )
    assert run.ids == run.agent.encode(fresh_render(run, TOOL_SCHEMAS))
    with pytest.raises(ValueError, match="has no thinking switch"):
        ChatFormat.from_tokenizer(run.agent.tok, kimi_dir, thinking="on")


def test_the_formats_calls_are_what_the_template_writes_for_tool_calls() -> None:
    tok = chat_tokenizer("kimi_k2")
    user = {"role": "user", "content": "fix add"}
    for calls in ([("view", {"path": "m.py", "start": 1, "end": 9})], [("undo", {}), ("bash", {"command": "ls"})]):
        structured = [
            {"id": f"functions.{n}:0", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in calls
        ]
        as_fields = [user, {"role": "assistant", "content": "", "tool_calls": structured}]
        as_content = [user, {"role": "assistant", "content": tool_format("kimi_k2").render(calls)}]
        assert tok.apply_chat_template(as_fields, tokenize=False) == tok.apply_chat_template(as_content, tokenize=False)


def test_the_tiny_model_is_a_deepseek_v3_that_stops_at_the_end_of_its_turn(tmp_path: Path) -> None:
    model_dir = build_chat_model("kimi_k2", tmp_path / "m")
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "deepseek_v3"
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir, tools=TOOL_SCHEMAS)
    end, eos = tok.convert_tokens_to_ids(END), tok.convert_tokens_to_ids("[EOS]")
    assert chat.end_id == end and set(chat.stop_ids) == {end, eos} and chat.extra_stop_ids == ()
