"""Each model family's own tool-call syntax, as its chat template writes a call and
vLLM's parser of the same name reads it (vllm/tool_parsers/; facts checked against
vLLM 0.32, pinned by tests/engines/test_tool_format_parity.py):

    hermes        Hermes, Qwen2.5, Qwen3     <tool_call>{"name": .., "arguments": {..}}</tool_call>
    llama3_json   Llama 3.1                  {"name": .., "parameters": {..}}
    glm45         GLM-4.5 to GLM-5           <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
    deepseek_v31  DeepSeek-V3.1              <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜> in its section
    kimi_k2       Kimi-K2                    <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{..}<|tool_call_end|> in its section
    qwen3_coder   Qwen3-Coder                <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>
    harmony       gpt-oss                    to=functions.NAME<|channel|>commentary json<|message|>{..}, ended by <|call|>

A format only reads and writes syntax; what a call means (a known tool, its required
arguments and their types, one call a turn) is decided once for all of them in
engines/tool_calls.py."""

from __future__ import annotations

from typing import Literal, get_args

from engines.tool_formats import deepseek_v31, glm45, harmony, hermes, kimi_k2, llama3_json, qwen3_coder
from engines.tool_formats.base import Call, ToolFormat

ToolFormatName = Literal["hermes", "llama3_json", "glm45", "deepseek_v31", "kimi_k2", "qwen3_coder", "harmony"]

FORMATS: dict[str, ToolFormat] = {
    "hermes": hermes.FORMAT,
    "llama3_json": llama3_json.FORMAT,
    "glm45": glm45.FORMAT,
    "deepseek_v31": deepseek_v31.FORMAT,
    "kimi_k2": kimi_k2.FORMAT,
    "qwen3_coder": qwen3_coder.FORMAT,
    "harmony": harmony.FORMAT,
}
TOOL_FORMATS: tuple[str, ...] = get_args(ToolFormatName)


def tool_format(name: str) -> ToolFormat:
    """The format named `name` (an inference.tool_format other than 'text')."""
    if name not in FORMATS:
        raise ValueError(f"tool format {name!r}: use one of {', '.join(TOOL_FORMATS)}")
    return FORMATS[name]


__all__ = ["FORMATS", "TOOL_FORMATS", "Call", "ToolFormat", "ToolFormatName", "tool_format"]
