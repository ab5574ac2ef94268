"""Qwen3-Coder XML calls (vLLM's `qwen3_coder` parser):

    <tool_call>
    <function=view>
    <parameter=path>
    a.py
    </parameter>
    </function>
    </tool_call>

Values are text with one wrapping newline on each side dropped (the template's), typed
by the schema. Stricter than vLLM's parser, which also reads a <function=...> outside
<tool_call> and a parameter left open before the next: both are refused here."""

from __future__ import annotations

import re

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, closed_blocks, value_text

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"\s*<function=(.*?)>(.*?)</function>\s*", re.S)
_PARAMETER = re.compile(r"<parameter=(.*?)>(.*?)</parameter>", re.S)


def _unwrap(value: str) -> str:
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


def extract(text: str) -> list[Call] | InvalidAction:
    bodies = closed_blocks(text, OPEN, CLOSE)
    if isinstance(bodies, InvalidAction):
        return bodies
    calls: list[Call] = []
    for body in bodies:
        function = _FUNCTION.fullmatch(body)
        if function is None or _PARAMETER.sub("", function.group(2)).strip():
            return InvalidAction(
                f"malformed call: write {OPEN}<function=NAME><parameter=K>V</parameter></function>{CLOSE}"
            )
        params = {k.strip(): _unwrap(v) for k, v in _PARAMETER.findall(function.group(2))}
        calls.append((function.group(1).strip(), params))
    return calls


def render(calls: list[Call]) -> str:
    return "\n".join(
        f"{OPEN}\n<function={name}>\n"
        + "".join(f"<parameter={k}>\n{value_text(v)}\n</parameter>\n" for k, v in args.items())
        + f"</function>\n{CLOSE}"
        for name, args in calls
    )


FORMAT = ToolFormat(extract, render, typed_by_schema=True)
