"""Hermes tool calls: round trips with the text actions, invalid calls as observations,
and the config refusing a chat template without tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2 import Template

from engines.inference.config import InferenceConfig
from engines.protocol import Action, InvalidAction, parse_action, render_action
from engines.tool_calls import (
    TOOL_SCHEMAS,
    as_tool_calls,
    parse_tool_call,
    protocol_text,
    render_tool_call,
    template_supports_tools,
)
from tests.chat_models import CHATML_TEMPLATE, LLAMA3_TEMPLATE
from tests.engines.test_protocol import ACTIONS as PROTOCOL_ACTIONS

pytestmark = pytest.mark.chat_template

# The protocol's own examples, and arguments JSON must escape (quotes, braces).
ACTIONS = [
    *PROTOCOL_ACTIONS,
    Action("replace", path="b.py", old='print("a")', new="print('b')"),
    Action("bash", body="ls -la && echo '{}'"),
]


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.tool)
def test_round_trip_agrees_with_text_actions(action: Action) -> None:
    assert parse_tool_call(render_tool_call(action)) == action
    assert parse_action(render_action(action)) == action


def test_one_schema_per_protocol_tool() -> None:
    from engines.protocol import TOOLS

    assert sorted(s["function"]["name"] for s in TOOL_SCHEMAS) == sorted(TOOLS)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("view a.py", "no tool call"),
        ('<tool_call>\n{"name": "view", "arguments": {"path": }\n</tool_call>', "not valid JSON"),
        ('<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>', "unknown tool 'rm'"),
        (
            '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py"}}\n</tool_call>',
            "missing argument(s) line, body",
        ),
        (
            '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "line": "2", "body": ""}}\n</tool_call>',
            "'line' must",
        ),
        (
            '<tool_call>\n{"name": "view", "arguments": {"path": "a.py", "start": 2}}\n</tool_call>',
            "both start and end",
        ),
        ('<tool_call>\n["view"]\n</tool_call>', '{"name": ..., "arguments": {...}}'),
    ],
)
def test_invalid_calls_become_observations(text: str, says: str) -> None:
    result = parse_tool_call(text)
    assert isinstance(result, InvalidAction)
    assert says in result.message


def test_chatml_template_lists_tools_only_when_given() -> None:
    messages = [{"role": "user", "content": "fix it"}]
    plain = Template(CHATML_TEMPLATE).render(messages=messages, add_generation_prompt=True)
    assert "<tools>" not in plain and plain.startswith("<|im_start|>user\n")
    with_tools = Template(CHATML_TEMPLATE).render(messages=messages, tools=TOOL_SCHEMAS, add_generation_prompt=True)
    assert with_tools.endswith(plain) and '"name": "submit"' in with_tools


def _model_dir(tmp_path: Path, template: str) -> str:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return str(tmp_path)


def test_hermes_refused_for_a_template_without_tools(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tool_format='hermes'.*tool_format = 'text'"):
        InferenceConfig(model_dir=_model_dir(tmp_path, LLAMA3_TEMPLATE), tool_format="hermes")
    assert InferenceConfig(model_dir=str(tmp_path), tool_format="text").tool_format == "text"


def test_hermes_accepted_for_a_template_with_tools(tmp_path: Path) -> None:
    assert (
        InferenceConfig(model_dir=_model_dir(tmp_path, CHATML_TEMPLATE), tool_format="hermes").tool_format == "hermes"
    )


def test_a_call_reaches_the_environment_as_its_text_action() -> None:
    for action in ACTIONS:
        assert protocol_text(render_tool_call(action)) == render_action(action)
    refused = protocol_text('<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>')
    assert isinstance(refused, InvalidAction) and "unknown tool 'rm'" in refused.message


def test_demonstrations_in_text_actions_become_tool_calls() -> None:
    call = render_tool_call(Action("test"))
    messages = [
        {"role": "user", "content": "fix add"},
        {"role": "assistant", "content": "view m.py", "train": False},
        {"role": "tool", "content": "1 x"},
        {"role": "assistant", "content": call},
    ]
    out = as_tool_calls(messages)
    assert out[1] == {"role": "assistant", "content": render_tool_call(Action("view", path="m.py")), "train": False}
    assert out[0] == messages[0] and out[3] == messages[3] and messages[1]["content"] == "view m.py"
    with pytest.raises(ValueError, match="demo 4, message 1: assistant turn is neither a tool call nor a text action"):
        as_tool_calls([messages[0], {"role": "assistant", "content": "I think the bug is in add"}], "demo 4")


def test_a_template_saved_beside_the_tokenizer_is_read(tmp_path: Path) -> None:
    assert template_supports_tools(str(tmp_path)) is None
    (tmp_path / "chat_template.jinja").write_text(LLAMA3_TEMPLATE)
    assert template_supports_tools(str(tmp_path)) is False
    (tmp_path / "chat_template.jinja").write_text(CHATML_TEMPLATE)
    assert template_supports_tools(str(tmp_path)) is True


def test_auto_reads_each_familys_call_syntax_from_its_template() -> None:
    """inference.tool_format 'auto': the format each test template (tests/chat_models.py)
    writes calls in; the text actions for templates that write none or list no tools."""
    from engines.protocol import CHAT_TEMPLATE
    from engines.tool_calls import template_tool_format
    from tests.chat_models import TEMPLATES

    settled = {name: template_tool_format([spec.template]) for name, spec in TEMPLATES.items()}
    assert settled == {
        "chatml": "hermes",
        "qwen3": "hermes",
        "llama3": "text",
        "olmoe": "text",
        "glm": "glm45",
        "qwen3_coder": "qwen3_coder",
        "deepseek_v31": "deepseek_v31",
        "kimi_k2": "kimi_k2",
        "llama3_1": "llama3_json",
        "gpt_oss": "harmony",
    }
    assert template_tool_format([CHAT_TEMPLATE]) == template_tool_format(None) == "text"
