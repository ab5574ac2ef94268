"""DeepSeek-V3.1's template (tests/chat_models.py) in the agent loop, on the scripted
generator: turns end with the eos <｜end▁of▁sentence｜>, tool outputs are followed by no
generation prompt, and the thinking switch is the template variable `thinking`.

Checked: with thinking on, the first prompt opens <think>, the first turn is its
reasoning closed by </think> and then the action, and the turns after an observation
start outside any reasoning (the template opens none there); the ids are the template's
fresh rendering except where it drops the first turn's reasoning, which the ids keep as
sampled. With thinking off or unset, and with calls in its own syntax (tool_format
'deepseek_v31') and the tools the model card lays out, the ids are the fresh rendering.
The tiny model is a DeepSeek-V3 whose eos ends each turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.model.chat_format import UNCLOSED_REASONING, ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call
from engines.tool_formats import tool_format
from tests.chat_models import build_chat_model, chat_tokenizer, chat_tokenizer_dir
from tests.engines.inference.family_episode import ACTIONS, assert_token_exact, fresh_render, model_turns, run_episode

pytestmark = pytest.mark.chat_template

EOS = "<｜end▁of▁sentence｜>"
# The first turn reasons inside the <think> its prompt opened; later turns follow an observation directly.
THINKING = [
    f"the test fails: look at add</think>{ACTIONS[0]}",
    ACTIONS[1],
    "<think>still weighing it",  # opened by the model and never closed: no action
    f"<think>done</think>{ACTIONS[2]}",
]


@pytest.fixture(scope="module")
def deepseek_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("deepseek_v31", tmp_path_factory.mktemp("deepseek_v31"))


def test_with_thinking_on_only_the_first_turn_starts_inside_its_reasoning(deepseek_dir: Path) -> None:
    run = run_episode(deepseek_dir, THINKING, EOS, thinking="on")
    assert_token_exact(run)
    chat = run.agent.chat
    assert chat.thinking_switch == "thinking" and chat.opens_reasoning and not chat.reopens_reasoning
    assert run.agent.decode(run.episode.prompt_ids).endswith("<｜User｜>fix add in m.py<｜Assistant｜><think>")
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    observations = [m["content"] for m in run.episode.messages if m["role"] == "tool"]
    assert observations == ["turn 1: ok", "turn 2: ok", f"error: {UNCLOSED_REASONING}"]
    assert model_turns(run) == [run.agent.encode(t) + [chat.end_id] for t in THINKING]
    # Re-rendered, the first turn loses its reasoning; the ids keep it as sampled.
    rendered = fresh_render(run, thinking=True)
    kept = rendered.replace(f"<｜Assistant｜></think>{ACTIONS[0]}", f"<｜Assistant｜><think>{THINKING[0]}", 1)
    assert rendered != kept and run.episode.conversation == kept
    assert f"{EOS}<｜tool▁output▁begin｜>turn 1: ok<｜tool▁output▁end｜>edit m.py 2" in run.episode.conversation


@pytest.mark.parametrize("thinking", [None, "off"])
def test_with_thinking_off_or_unset_the_ids_are_the_templates_fresh_rendering(
    deepseek_dir: Path, thinking: str | None
) -> None:
    run = run_episode(deepseek_dir, ACTIONS, EOS, **({"thinking": thinking} if thinking else {}))
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and not run.agent.chat.opens_reasoning
    assert run.agent.decode(run.episode.prompt_ids).endswith("<｜Assistant｜></think>")
    assert run.ids == run.agent.encode(fresh_render(run, thinking=False))


def test_calls_in_its_syntax_with_the_model_cards_tools_are_the_fresh_rendering(deepseek_dir: Path) -> None:
    calls = [render_tool_call(parse_action(a), "deepseek_v31") for a in ACTIONS]  # type: ignore[arg-type]
    run = run_episode(deepseek_dir, calls, EOS, tool_format="deepseek_v31")
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    prompt = run.agent.decode(run.episode.prompt_ids)
    assert "\n\n## Tools\nYou have access to the following tools:\n\n### view\nDescription: Show" in prompt
    assert run.ids == run.agent.encode(fresh_render(run, TOOL_SCHEMAS))


def test_the_formats_calls_are_what_the_template_writes_for_tool_calls() -> None:
    tok = chat_tokenizer("deepseek_v31")
    user = {"role": "user", "content": "fix add"}
    for calls in ([("view", {"path": "m.py", "start": 1, "end": 9})], [("undo", {}), ("bash", {"command": "ls"})]):
        structured = [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]
        as_fields = [user, {"role": "assistant", "content": "", "tool_calls": structured}]
        as_content = [user, {"role": "assistant", "content": tool_format("deepseek_v31").render(calls)}]
        assert tok.apply_chat_template(as_fields, tokenize=False) == tok.apply_chat_template(as_content, tokenize=False)


def test_the_tiny_model_is_a_deepseek_v3_whose_eos_ends_each_turn(tmp_path: Path) -> None:
    model_dir = build_chat_model("deepseek_v31", tmp_path / "m")
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "deepseek_v3"
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir, thinking="on")
    eos = tok.convert_tokens_to_ids(EOS)
    assert (
        chat.end_id == eos and chat.stop_ids == (eos,) and chat.extra_stop_ids == () and chat.observation_role == "tool"
    )
