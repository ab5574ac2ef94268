"""Llama 3.1's JSON calls for custom tools (vLLM's `llama3_json` parser): the turn is

    {"name": "view", "parameters": {"path": "a.py"}}

optionally after <|python_tag|>, several separated by "; ". Read as vLLM reads them:
each "{" outside an object already read starts a JSON object, "arguments" is taken
before "parameters", and one object that does not decode or lacks a name or arguments
makes the whole turn no call (text with a stray brace included)."""

from __future__ import annotations

import json

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat

PYTHON_TAG = "<|python_tag|>"
_DECODER = json.JSONDecoder()


def extract(text: str) -> list[Call] | InvalidAction:
    calls: list[Call] = []
    end = -1
    for start in (i for i, c in enumerate(text) if c == "{"):
        if start <= end:  # inside (or just after) an object already read, as vLLM skips it
            continue
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as err:
            return InvalidAction(f"tool call is not valid JSON: {err}")
        key = "arguments" if "arguments" in obj else "parameters"
        if "name" not in obj or not isinstance(obj.get(key), dict):
            return InvalidAction('tool call must be {"name": ..., "parameters": {...}}')
        calls.append((obj["name"], obj[key]))
    return calls


def render(calls: list[Call]) -> str:
    return "; ".join(json.dumps({"name": name, "parameters": args}, ensure_ascii=False) for name, args in calls)


FORMAT = ToolFormat(extract, render)
