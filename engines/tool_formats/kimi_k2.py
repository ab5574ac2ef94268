"""Kimi-K2 calls (vLLM's `kimi_k2` parser):

    <|tool_calls_section_begin|><|tool_call_begin|>functions.view:0<|tool_call_argument_begin|>{"path": "a.py"}<|tool_call_end|><|tool_calls_section_end|>

The header is Kimi's call id, `functions.NAME:INDEX` (the index counts the
conversation's calls; a rendered demonstration writes 0). Read as vLLM reads them:
calls only after the section's opening, its closing optional, empty arguments as {},
and the values typed by the schema."""

from __future__ import annotations

import json
import re

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, json_arguments

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_CALL = re.compile(re.escape(CALL_BEGIN) + "(.*?)" + re.escape(ARGS_BEGIN) + "(.*?)" + re.escape(CALL_END), re.S)
_ID = re.compile(r".+:\d+")


def extract(text: str) -> list[Call] | InvalidAction:
    start = text.find(SECTION_BEGIN)
    if start < 0:
        return []
    calls: list[Call] = []
    end = start
    for match in _CALL.finditer(text, start):
        header, body = match.group(1).strip(), match.group(2).strip()
        ident = _ID.match(header)
        if ident is None:
            return InvalidAction(f"tool call id {header!r}: write functions.NAME:0")
        args = json_arguments(body) if body else {}
        if isinstance(args, InvalidAction):
            return args
        calls.append((ident.group().split(":")[0].removeprefix("functions."), args))
        end = match.end()
    if CALL_BEGIN in text[end:]:
        return InvalidAction(f"tool call not closed: end it with {CALL_END}")
    return calls


def render(calls: list[Call]) -> str:
    inner = "".join(
        f"{CALL_BEGIN}functions.{name}:0{ARGS_BEGIN}{json.dumps(args, ensure_ascii=False)}{CALL_END}"
        for name, args in calls
    )
    return f"{SECTION_BEGIN}{inner}{SECTION_END}"


FORMAT = ToolFormat(extract, render, typed_by_schema=True)
