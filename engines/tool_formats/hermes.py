"""Hermes / Qwen2.5 / Qwen3 JSON calls (vLLM's `hermes` parser):

    <tool_call>
    {"name": "view", "arguments": {"path": "a.py"}}
    </tool_call>

one block per call. Like vLLM's parser, a block whose JSON does not decode, or lacks
"name" or "arguments", makes the whole turn no call; unlike it, an unclosed last block
is refused (base.closed_blocks)."""

from __future__ import annotations

import json

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, closed_blocks, json_value

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def extract(text: str) -> list[Call] | InvalidAction:
    bodies = closed_blocks(text, OPEN, CLOSE)
    if isinstance(bodies, InvalidAction):
        return bodies
    calls: list[Call] = []
    for body in bodies:
        call = json_value(body)
        if isinstance(call, InvalidAction):
            return call
        if not isinstance(call, dict) or "name" not in call or not isinstance(call.get("arguments"), dict):
            return InvalidAction('tool call must be {"name": ..., "arguments": {...}}')
        calls.append((call["name"], call["arguments"]))
    return calls


def render(calls: list[Call]) -> str:
    return "\n".join(f"{OPEN}\n{json.dumps({'name': name, 'arguments': args})}\n{CLOSE}" for name, args in calls)


FORMAT = ToolFormat(extract, render)
