"""Each family's tool-call format: round trips with the text actions, what we read from
each model text of tests/engines/tool_format_cases.py (vLLM's reading of the same texts:
test_tool_format_parity.py), one call a turn, and the formats behind one registry."""

from __future__ import annotations

from typing import get_args

import pytest

from engines.inference.config import InferenceConfig
from engines.protocol import Action, InvalidAction, render_action
from engines.tool_calls import (
    as_tool_calls,
    parse_tool_call,
    protocol_text,
    render_tool_call,
    tool_arguments,
    typed_arguments,
    validate_call,
)
from engines.tool_formats import FORMATS, TOOL_FORMATS, tool_format
from tests.engines.test_tool_calls import ACTIONS
from tests.engines.tool_format_cases import CASES, Case

pytestmark = pytest.mark.chat_template

# Values the XML-style formats carry as text: newlines at either end, markup-like text.
TEXT_EDGES = [
    Action("edit", path="a.py", line=2, body=""),
    Action("edit", path="a.py", line=2, body="\n"),
    Action("edit", path="a.py", line=2, body="\n  if a < b:\n\treturn {'k': 1}\n\n"),
    Action("replace", path="a.py", old="12", new="x = 1"),
]


def test_one_registry_behind_the_config_and_the_cli_names() -> None:
    assert tuple(FORMATS) == TOOL_FORMATS
    assert get_args(InferenceConfig.model_fields["tool_format"].annotation) == ("auto", "text", *TOOL_FORMATS)
    with pytest.raises(ValueError, match="tool format 'json': use one of hermes, llama3_json"):
        tool_format("json")


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
@pytest.mark.parametrize("action", ACTIONS + TEXT_EDGES, ids=lambda a: a.tool)
def test_round_trip_agrees_with_text_actions(fmt: str, action: Action) -> None:
    text = render_tool_call(action, fmt)
    assert parse_tool_call(text, fmt) == action
    assert protocol_text(text, fmt) == render_action(action)
    assert parse_tool_call(text) == action  # a stored turn, read without its run's format


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_model_text_reads_as_stated(case: Case) -> None:
    action = parse_tool_call(case.text, case.fmt)
    read = [action.tool, tool_arguments(action)] if isinstance(action, Action) else None
    assert read == case.ours


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_several_calls_are_refused_not_cut_to_the_first(fmt: str) -> None:
    text = tool_format(fmt).render([("view", {"path": "a.py"}), ("submit", {})])
    refused = parse_tool_call(text, fmt)
    assert isinstance(refused, InvalidAction) and "2 tool calls in one turn" in refused.message


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_a_turn_without_a_call_is_shown_the_formats_call(fmt: str) -> None:
    refused = parse_tool_call("I would look at a.py", fmt)
    assert isinstance(refused, InvalidAction)
    assert refused.message == f"no tool call; answer with {tool_format(fmt).render([('view', {'path': 'a.py'})])}"


@pytest.mark.parametrize(
    ("fmt", "text", "says"),
    [
        ("hermes", '<tool_call>\n{"name": "submit", "arguments": {}}', "not closed: end it with </tool_call>"),
        ("glm45", "<tool_call>submit", "not closed: end it with </tool_call>"),
        ("qwen3_coder", "<tool_call>\n<function=submit>\n</function>\n", "not closed"),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.submit:0<|tool_call_argument_begin|>{}", "not closed"),
        ("deepseek_v31", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>submit<｜tool▁sep｜>{}', "on one line"),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>submit<|tool_call_argument_begin|>{}<|tool_call_end|>", "functions.NAME:0"),
        ("glm45", "<tool_call>view<arg_key>path</arg_key>a.py</tool_call>", "malformed arguments"),
        ("qwen3_coder", "<tool_call>\n<function=view>\n<parameter=path>\na.py\n</function>\n</tool_call>", "malformed call"),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.submit:0<|tool_call_argument_begin|>[1]<|tool_call_end|>", "must be a JSON object"),
    ],
)  # fmt: skip
def test_malformed_calls_say_what_is_wrong(fmt: str, text: str, says: str) -> None:
    refused = parse_tool_call(text, fmt)
    assert isinstance(refused, InvalidAction) and says in refused.message, refused


def test_values_take_the_schemas_types_where_vllm_types_them() -> None:
    assert typed_arguments("edit", {"path": 3, "line": " 7 ", "body": ["x"]}) == {
        "path": "3",
        "line": 7,
        "body": '["x"]',
    }
    assert typed_arguments("edit", {"line": "seventh"}) == {"line": "seventh"}  # left for validate_call to refuse
    assert typed_arguments("rm", {"a": "1"}) == {"a": "1"}
    assert not tool_format("hermes").typed_by_schema and tool_format("glm45").typed_by_schema
    refused = parse_tool_call('<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "line": "7", "body": ""}}\n</tool_call>', "hermes")  # fmt: skip
    assert isinstance(refused, InvalidAction) and "'line' must be an integer" in refused.message


def test_a_boolean_is_not_an_integer() -> None:
    refused = validate_call("edit", {"path": "a.py", "line": True, "body": "x"})
    assert isinstance(refused, InvalidAction) and "'line' must be an integer" in refused.message


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_demonstrations_become_calls_in_the_runs_format(fmt: str) -> None:
    call = render_tool_call(Action("test"), fmt)
    messages = [
        {"role": "user", "content": "fix add"},
        {"role": "assistant", "content": "view m.py", "train": False},
        {"role": "tool", "content": "1 x"},
        {"role": "assistant", "content": call},
    ]
    out = as_tool_calls(messages, "demo", fmt)
    assert out[1] == {**messages[1], "content": render_tool_call(Action("view", path="m.py"), fmt)}
    assert out[3] == messages[3]
    with pytest.raises(ValueError, match=f"demo, message 1: assistant turn is neither .* as a {fmt} call: "):
        as_tool_calls([messages[0], {"role": "assistant", "content": "I think the bug is in add"}], "demo", fmt)
