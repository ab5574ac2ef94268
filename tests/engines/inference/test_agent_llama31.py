"""Llama-3.1-Instruct's published template (tests/chat_models.py) in the agent loop, on
the scripted generator: a dated system turn, every text trimmed, tools listed in the
first user message, tool results in an `ipython` turn written through `tojson`, calls as
{"name": ..., "parameters": {...}} (tool_format 'llama3_json'), <|eot_id|> closing every
turn.

Checked: with text actions and with calls the ids are the template's fresh rendering of
the conversation, each request extending the previous one; an observation of several
lines, quotes included, reaches the model JSON-quoted and is not taken for a dropped one;
the calls the format writes are what the template writes for an assistant message's
`tool_calls`; thinking is refused; the turn ends at <|eot_id|>, and the generation
config's other eos ids stop it too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.model.chat_format import ChatFormat
from engines.protocol import parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
from engines.tool_formats import tool_format
from tests.chat_models import chat_tokenizer, chat_tokenizer_dir
from tests.engines.inference import family_episode
from tests.engines.inference.family_episode import ACTIONS, assert_token_exact, fresh_render, model_turns, run_episode

pytestmark = pytest.mark.chat_template

EOT = "<|eot_id|>"
# A page of code as the env shows it: several lines, quotes and a backslash.
PAGE = '1 def add(a, b):\n2     """Sum."""\n3     return a - b  # "wrong" \\ here'


class PageEnv(family_episode.EchoEnv):
    """Answers every action with a page of code, as `view` does."""

    def step(self, action_text: str) -> family_episode.Step:
        step = super().step(action_text)
        return family_episode.Step(f"{step.observation}\n{PAGE}", step.done)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("llama3_1", tmp_path_factory.mktemp("llama3_1"))


def test_text_actions_are_the_templates_fresh_rendering(llama_dir: Path) -> None:
    run = run_episode(llama_dir, ACTIONS, EOT)
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.chat.observation_role == "tool"
    assert model_turns(run) == [run.agent.encode(a) + [run.agent.chat.end_id] for a in ACTIONS]
    prompt = run.agent.decode(run.episode.prompt_ids)
    assert prompt.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou fix a bug"
    )
    assert prompt.endswith("fix add in m.py<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    turn_one = f'view m.py{EOT}<|start_header_id|>ipython<|end_header_id|>\n\n"turn 1: ok"{EOT}'
    assert turn_one in run.episode.conversation
    assert run.ids == run.agent.encode(fresh_render(run))


def test_an_observation_of_several_lines_reaches_the_model_json_quoted(
    llama_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(family_episode, "EchoEnv", PageEnv)
    run = run_episode(llama_dir, ACTIONS, EOT)
    assert_token_exact(run)
    assert run.env.actions == ACTIONS
    quoted = json.dumps(f"turn 1: ok\n{PAGE}", ensure_ascii=False)
    assert f"<|start_header_id|>ipython<|end_header_id|>\n\n{quoted}{EOT}" in run.episode.conversation
    assert run.ids == run.agent.encode(fresh_render(run))


def test_calls_with_the_tools_in_the_first_user_message_are_the_fresh_rendering(llama_dir: Path) -> None:
    calls = [render_tool_call(parse_action(a), "llama3_json") for a in ACTIONS]  # type: ignore[arg-type]
    run = run_episode(llama_dir, calls, EOT, tool_format="llama3_json")
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    prompt = run.agent.decode(run.episode.prompt_ids)
    assert prompt.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n")
    assert "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions" in prompt
    assert run.ids == run.agent.encode(fresh_render(run, TOOL_SCHEMAS))
    with pytest.raises(ValueError, match="has no thinking switch"):
        ChatFormat.from_tokenizer(run.agent.tok, llama_dir, thinking="on")


def test_the_formats_call_is_what_the_template_writes_for_tool_calls() -> None:
    tok = chat_tokenizer("llama3_1")
    user = {"role": "user", "content": "fix add"}
    for name, args in [("view", {"path": "m.py", "start": 1, "end": 9}), ("bash", {"command": 'grep -n "add" m.py'})]:
        structured = [{"type": "function", "function": {"name": name, "arguments": args}}]
        as_fields = [user, {"role": "assistant", "tool_calls": structured}]
        as_content = [user, {"role": "assistant", "content": tool_format("llama3_json").render([(name, args)])}]
        assert tok.apply_chat_template(as_fields, tokenize=False) == tok.apply_chat_template(as_content, tokenize=False)


def test_the_turn_ends_at_eot_and_the_generation_configs_eos_ids_stop_it(llama_dir: Path) -> None:
    tok = chat_tokenizer("llama3_1")
    chat = ChatFormat.from_tokenizer(tok, llama_dir)
    ids = {t: tok.convert_tokens_to_ids(t) for t in (EOT, "<|eom_id|>", "<|end_of_text|>")}
    assert chat.end_id == ids[EOT] and set(chat.stop_ids) == set(ids.values())
