"""DeepSeek-V3.1 calls (vLLM's `deepseek_v31` parser):

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>view<｜tool▁sep｜>{"path": "a.py"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Read as vLLM reads them: only a turn holding the section's opening has calls, each
call is one line (a newline inside it makes it no call), the name is kept as written,
and the section's closing is optional."""

from __future__ import annotations

import json
import re

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, json_arguments

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
_CALL = re.compile(re.escape(CALL_BEGIN) + "(.*?)" + re.escape(SEP) + "(.*?)" + re.escape(CALL_END))


def extract(text: str) -> list[Call] | InvalidAction:
    if CALLS_BEGIN not in text:
        return []
    calls: list[Call] = []
    end = 0
    for match in _CALL.finditer(text):
        args = json_arguments(match.group(2))
        if isinstance(args, InvalidAction):
            return args
        calls.append((match.group(1), args))
        end = match.end()
    if not calls or CALL_BEGIN in text[end:]:
        return InvalidAction(f"tool call not closed: write {CALL_BEGIN}NAME{SEP}{{...}}{CALL_END} on one line")
    return calls


def render(calls: list[Call]) -> str:
    inner = "".join(f"{CALL_BEGIN}{name}{SEP}{json.dumps(args, ensure_ascii=False)}{CALL_END}" for name, args in calls)
    return f"{CALLS_BEGIN}{inner}{CALLS_END}"


FORMAT = ToolFormat(extract, render)
