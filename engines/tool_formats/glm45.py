"""GLM-4.5, 4.6, 4.7 and 5 calls (vLLM's `glm45` parser, the same as its `glm47`):

    <tool_call>view
    <arg_key>path</arg_key>
    <arg_value>a.py</arg_value>
    </tool_call>

GLM-4.7 and 5 write no newlines between the tags; both read the same. The name is the
text before the first <arg_key>, stripped; keys are stripped and values kept as
written. Values are text (the template writes a non-text value as JSON), typed back by
the schema. Text between the pairs that is not a pair is refused where vLLM skips it."""

from __future__ import annotations

import re

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, closed_blocks, value_text

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY = "<arg_key>"
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def extract(text: str) -> list[Call] | InvalidAction:
    bodies = closed_blocks(text, OPEN, CLOSE)
    if isinstance(bodies, InvalidAction):
        return bodies
    calls: list[Call] = []
    for body in bodies:
        name, key, rest = body.partition(KEY)
        pairs = key + rest
        if _PAIR.sub("", pairs).strip():
            return InvalidAction(f"malformed arguments: write each as {KEY}K</arg_key><arg_value>V</arg_value>")
        calls.append((name.strip(), {k.strip(): v for k, v in _PAIR.findall(pairs)}))
    return calls


def render(calls: list[Call]) -> str:
    return "\n".join(
        f"{OPEN}{name}\n"
        + "".join(f"{KEY}{k}</arg_key>\n<arg_value>{value_text(v)}</arg_value>\n" for k, v in args.items())
        + CLOSE
        for name, args in calls
    )


FORMAT = ToolFormat(extract, render, typed_by_schema=True)
