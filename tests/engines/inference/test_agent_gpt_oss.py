"""gpt-oss's harmony template (tests/chat_models.py) in the agent loop, on the scripted
generator: a model turn is several messages (reasoning on the analysis channel, then a
call ended by <|call|> or a final answer ended by <|return|>).

Checked: with calls (tool_format 'harmony', chosen from the template by 'auto') the ids
are the template's fresh rendering of the conversation with each turn's reasoning and
call as `thinking` and `tool_calls`, each request extending the previous one, and every
observation is the called function's reply; with text actions each sampled turn keeps
its reasoning and its <|return|> (the template would write <|end|> and drop the
reasoning), and observations are user turns; reasoning is never read as an action, a
turn with no final answer or call is answered with the reason and no step; SFT's ids
are the loop's; the calls the format writes are the template's; thinking is refused (the
template has no switch: gpt-oss always reasons); the tiny model is a GptOss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.inference.config import InferenceConfig
from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import parse_action
from engines.tool_calls import TOOL_SCHEMAS, render_tool_call, template_tool_format
from engines.tool_formats import harmony
from tests.chat_models import GPT_OSS_TEMPLATE, build_chat_model, chat_tokenizer, chat_tokenizer_dir
from tests.engines.inference.family_episode import ACTIONS, assert_token_exact, model_turns, run_episode

pytestmark = pytest.mark.chat_template

REASONS = ["the test fails: look at add", "add subtracts", "done"]
CALL, RETURN = harmony.CALL, harmony.RETURN


def analysis(text: str) -> str:
    return f"{harmony.CHANNEL}analysis{harmony.MESSAGE}{text}{harmony.END}{harmony.START}assistant"


def calls() -> list[str]:
    return [render_tool_call(parse_action(a), "harmony") for a in ACTIONS]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def oss_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_tokenizer_dir("gpt_oss", tmp_path_factory.mktemp("gpt_oss"))


def test_calls_after_reasoning_are_the_templates_fresh_rendering(oss_dir: Path) -> None:
    script = [analysis(r) + c for r, c in zip(REASONS, calls())]
    run = run_episode(oss_dir, script, CALL, tool_format="auto")
    assert run.agent.cfg.tool_format == "harmony"
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.valid_actions(run.episode.messages) == 3
    call = run.agent.chat.tokenizer.convert_tokens_to_ids(CALL)
    assert model_turns(run) == [run.agent.encode(t) + [call] for t in script]
    # The same conversation as a client of the model would hand it to the template.
    messages = run.episode.messages[:2]
    observations = [m for m in run.episode.messages if m["role"] == "tool"]
    for k, (reason, call) in enumerate(zip(REASONS, calls())):
        ((name, args),) = harmony.extract(call)
        tool_call = {"type": "function", "function": {"name": name, "arguments": args}}
        messages += [{"role": "assistant", "thinking": reason, "tool_calls": [tool_call]}, *observations[k : k + 1]]
    rendered = run.agent.tok.apply_chat_template(messages, tools=TOOL_SCHEMAS, tokenize=False)
    assert run.ids == run.agent.encode(rendered)
    assert '<|start|>functions.view to=assistant<|channel|>commentary<|message|>"turn 1: ok"<|end|>' in rendered


def test_text_answers_keep_their_reasoning_and_return_as_sampled(oss_dir: Path) -> None:
    script = [analysis(r) + harmony.as_final(a) for r, a in zip(REASONS, ACTIONS)]
    run = run_episode(oss_dir, script, RETURN, tool_format="text")
    assert_token_exact(run)
    assert run.env.actions == ACTIONS and run.agent.chat.observation_role == "user"
    end = run.agent.chat.end_id
    assert model_turns(run) == [run.agent.encode(t) + [end] for t in script]
    first, second = run.episode.conversation.split(RETURN)[:2]
    assert first.endswith("<|start|>assistant" + script[0])
    assert second == "<|start|>user<|message|>turn 1: ok<|end|><|start|>assistant" + script[1]
    # A fresh rendering drops earlier reasoning and ends answers with <|end|>: the sent ids never change.
    rendered = run.agent.tok.apply_chat_template(run.episode.messages[:2], tokenize=False, add_generation_prompt=True)
    assert run.episode.conversation.startswith(rendered)


def test_reasoning_is_never_an_action_and_a_turn_without_an_answer_takes_no_step(oss_dir: Path) -> None:
    script = [
        f"{harmony.CHANNEL}analysis{harmony.MESSAGE}submit",  # cut by length before any answer
        analysis("view m.py or submit?") + harmony.as_final("view m.py"),
        harmony.as_final("submit"),
    ]
    run = run_episode(oss_dir, [(script[0], None), *script[1:]], RETURN, tool_format="text")
    assert run.env.actions == ["view m.py", "submit"]
    observations = [m["content"] for m in run.episode.messages if m["role"] == "user"][1:]
    assert observations[0].startswith("error: no answer: end your turn with <|channel|>final<|message|>")
    # A turn cut by length is closed with <|end|> before the observation.
    assert run.agent.decode(run.episode.completion_ids).startswith(script[0] + "<|end|><|start|>user<|message|>error")
    assert run.agent.valid_actions(run.episode.messages) == 2


def test_sft_ids_are_the_agent_loops(oss_dir: Path) -> None:
    """Demonstrations as SFT reads them: calls in the format's text, text actions plain."""
    finals = [harmony.as_final(a) for a in ACTIONS]
    for fmt, stop, sampled, demo in (("harmony", CALL, calls(), calls()), ("text", RETURN, finals, ACTIONS)):
        run = run_episode(oss_dir, sampled, stop, tool_format=fmt)
        turns = iter(demo)
        messages = [{**m, "content": next(turns)} if m["role"] == "assistant" else m for m in run.episode.messages]
        ids, mask = run.agent.chat.conversation(messages)
        assert ids == run.ids, fmt
        assert [i for i, m in zip(ids, mask) if m] == [i for t in model_turns(run) for i in t]


def test_the_formats_calls_are_what_the_template_writes_for_tool_calls(oss_dir: Path) -> None:
    tok = chat_tokenizer("gpt_oss")
    user = {"role": "user", "content": "fix add"}
    for name, args in (("view", {"path": "m.py", "start": 1, "end": 9}), ("submit", {})):
        structured = {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
        }
        with_fields = tok.apply_chat_template([user, structured], tokenize=False)
        turn = harmony.render([(name, args)])
        assert with_fields.endswith(f"<|start|>assistant{turn}{CALL}")
        assert harmony.extract(turn) == [(name, args)]
    assert template_tool_format([GPT_OSS_TEMPLATE]) == "harmony"


def test_thinking_is_refused_and_the_tiny_model_is_a_gpt_oss(tmp_path: Path, oss_dir: Path) -> None:
    with pytest.raises(ValueError, match="has no thinking switch"):
        ChatFormat.from_tokenizer(chat_tokenizer("gpt_oss"), oss_dir, thinking="on")
    with pytest.raises(ValueError, match="no thinking switch"):
        InferenceConfig(model_dir=str(oss_dir), thinking="on")
    model_dir = build_chat_model("gpt_oss", tmp_path / "m")
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "gpt_oss"
    tok = load_tokenizer(model_dir)
    chat = ChatFormat.from_tokenizer(tok, model_dir, tools=TOOL_SCHEMAS)
    ids = {t: tok.convert_tokens_to_ids(t) for t in (RETURN, CALL, "<|endoftext|>")}
    assert chat.harmony and set(chat.stop_ids) == set(ids.values()) and chat.extra_stop_ids == ()
