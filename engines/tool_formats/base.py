"""What every tool-call format shares: a call as (name, arguments), and the readers of
the pieces several formats have in common (JSON arguments, closed blocks)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.protocol import InvalidAction

Call = tuple[Any, dict[str, Any]]  # (name as written, arguments)


@dataclass(frozen=True)
class ToolFormat:
    """One family's syntax. `extract` gives every call a turn holds ([] for none), or an
    InvalidAction for a call it cannot read; `render` writes calls as the family's
    template does. `typed_by_schema`: the values are text, or loosely typed, and take
    the tool schema's types, as vLLM's parser of the family types them."""

    extract: Callable[[str], list[Call] | InvalidAction]
    render: Callable[[list[Call]], str]
    typed_by_schema: bool = False


def json_value(text: str) -> Any:
    """The JSON value of `text`, or why it is none."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        return InvalidAction(f"tool call is not valid JSON: {err}")


def json_arguments(text: str) -> dict[str, Any] | InvalidAction:
    """A call's arguments written as one JSON object."""
    value = json_value(text)
    if isinstance(value, (InvalidAction, dict)):
        return value
    return InvalidAction("tool call arguments must be a JSON object")


def closed_blocks(text: str, open_tag: str, close_tag: str) -> list[str] | InvalidAction:
    """The bodies of the `open_tag`...`close_tag` blocks of `text`. A block opened and
    never closed is refused: a call cut short (by the token limit) would otherwise run
    with whatever it had written so far."""
    pattern = re.compile(re.escape(open_tag) + r"(.*?)" + re.escape(close_tag), re.S)
    bodies, end = [], 0
    for match in pattern.finditer(text):
        bodies.append(match.group(1))
        end = match.end()
    if open_tag in text[end:]:
        return InvalidAction(f"tool call not closed: end it with {close_tag}")
    return bodies


def value_text(value: Any) -> str:
    """An argument as the XML-style templates write it: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
