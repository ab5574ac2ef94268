"""Hermes-style native tool calls: the JSON twin of the text actions in engines/protocol.py.

With `inference.tool_format = "hermes"` the assistant emits

    <tool_call>
    {"name": "view", "arguments": {"path": "a.py"}}
    </tool_call>

and `TOOL_SCHEMAS` go to the chat template as `tools=` (engines/model/chat_format.py). The
call is parsed here, not by the server, so the token ids stay exactly what the model
sampled. The agent loop hands the environment the call's text action (`protocol_text`),
so the environment speaks one language; a bad call becomes an `InvalidAction`
observation, as bad text does. SFT demonstrations written as text actions become tool
calls with `as_tool_calls`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engines.protocol import TOOLS, Action, InvalidAction, parse_action, render_action

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


def _schema(name: str, description: str, properties: dict[str, dict[str, str]], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_STR, _INT = {"type": "string"}, {"type": "integer"}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema(
        "view",
        "Show numbered lines of a file: a page from the top, `start` to `end`, or the one function or class named "
        "`function` (qualified as `Class.method` where the name repeats).",
        {"path": _STR, "start": _INT, "end": _INT, "function": _STR},
        ["path"],
    ),
    _schema(
        "edit",
        "Replace line `line` (1-based) with `body`.",
        {"path": _STR, "line": _INT, "body": _STR},
        ["path", "line", "body"],
    ),
    _schema(
        "replace",
        "Replace `old` by `new` in the file.",
        {"path": _STR, "old": _STR, "new": _STR},
        ["path", "old", "new"],
    ),
    _schema(
        "change",
        "Replace one-line `old` by `new` once within `scope` (a line number, or a function or class name, "
        "qualified as `Class.method` where the name repeats).",
        {"path": _STR, "scope": _STR, "old": _STR, "new": _STR},
        ["path", "scope", "old", "new"],
    ),
    _schema("undo", "Revert your last edit that is still in place.", {}, []),
    _schema("bash", "Run a shell command in the sandbox.", {"command": _STR}, ["command"]),
    _schema("test", "Run the repository's tests as they are (hidden tests may decide the grade).", {}, []),
    _schema("submit", "End the episode; your changes are graded.", {}, []),
]
_REQUIRED = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}


def parse_tool_call(text: str) -> Action | InvalidAction:
    """Parse one assistant turn holding a single `<tool_call>` block into an action."""
    start, end = text.find(CALL_OPEN), text.rfind(CALL_CLOSE)
    if start < 0 or end < start:
        return InvalidAction(f'no tool call; answer with {CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{CALL_CLOSE}')
    try:
        call = json.loads(text[start + len(CALL_OPEN) : end])
    except json.JSONDecodeError as err:
        return InvalidAction(f"tool call is not valid JSON: {err}")
    if not isinstance(call, dict) or not isinstance(call.get("arguments", {}), dict):
        return InvalidAction('tool call must be {"name": ..., "arguments": {...}}')
    name, args = call.get("name"), call.get("arguments", {})
    if name not in _REQUIRED:
        return InvalidAction(f"unknown tool {name!r}; use one of: {', '.join(TOOLS)}")
    params = _REQUIRED[name]
    missing = [k for k in params["required"] if k not in args]
    if missing:
        return InvalidAction(f"{name}: missing argument(s) {', '.join(missing)}")
    for key, value in args.items():
        kind = params["properties"].get(key, {}).get("type")
        if kind == "string" and not isinstance(value, str) or kind == "integer" and not isinstance(value, int):
            return InvalidAction(f"{name}: argument {key!r} must be a {kind}")
    return _action(name, args)


def _action(name: str, args: dict[str, Any]) -> Action | InvalidAction:
    if name in ("test", "submit", "undo"):
        return Action(name)
    if name == "bash":
        return (
            Action("bash", body=args["command"]) if args["command"].strip() else InvalidAction("bash: give a command")
        )
    if name == "view":
        if ("start" in args) != ("end" in args):
            return InvalidAction("view: give both start and end, or neither")
        if "function" in args and "start" in args:
            return InvalidAction("view: give start and end, or a function, not both")
        return Action(
            "view", path=args["path"], line=args.get("start"), end_line=args.get("end"), scope=args.get("function", "")
        )
    if name == "edit":
        if args["line"] < 1:
            return InvalidAction("edit: line is 1-based")
        return Action("edit", path=args["path"], line=args["line"], body=args["body"])
    if name == "replace":
        return Action("replace", path=args["path"], old=args["old"], new=args["new"])
    scope = args["scope"]
    if scope.isdigit():
        return Action("change", path=args["path"], line=int(scope), old=args["old"], new=args["new"])
    return Action("change", path=args["path"], scope=scope, old=args["old"], new=args["new"])


def render_tool_call(action: Action) -> str:
    """Inverse of `parse_tool_call`: the canonical tool-call text of an action (oracle demonstrations)."""
    if action.tool in ("test", "submit", "undo"):
        args: dict[str, Any] = {}
    elif action.tool == "bash":
        args = {"command": action.body}
    elif action.tool == "view":
        args = {"path": action.path} | (
            {"start": action.line, "end": action.end_line} if action.line is not None else {}
        )
        args |= {"function": action.scope} if action.scope else {}
    elif action.tool == "edit":
        args = {"path": action.path, "line": action.line, "body": action.body}
    elif action.tool == "replace":
        args = {"path": action.path, "old": action.old, "new": action.new}
    else:
        scope = str(action.line) if action.line is not None else action.scope
        args = {"path": action.path, "scope": scope, "old": action.old, "new": action.new}
    return f"{CALL_OPEN}\n{json.dumps({'name': action.tool, 'arguments': args})}\n{CALL_CLOSE}"


def protocol_text(text: str) -> str | InvalidAction:
    """The text action (engines/protocol.py) a tool-call turn stands for, or why it is none."""
    action = parse_tool_call(text)
    return action if isinstance(action, InvalidAction) else render_action(action)


def as_tool_calls(messages: list[dict], where: str = "conversation") -> list[dict]:
    """`messages` with each assistant turn written as a text action rewritten as its tool
    call (turns already holding a `<tool_call>` kept). Raises ValueError naming the message
    that is neither."""
    out = []
    for i, m in enumerate(messages):
        content = str(m.get("content") or "")
        if m.get("role") == "assistant" and CALL_OPEN not in content:
            action = parse_action(content)
            if isinstance(action, InvalidAction):
                raise ValueError(
                    f"{where}, message {i}: assistant turn is neither a tool call nor a text action "
                    f"({action.message}); write it as {CALL_OPEN}{{...}}{CALL_CLOSE} or in engines/protocol.py's language"
                )
            m = {**m, "content": render_tool_call(action)}
        out.append(m)
    return out


def chat_templates(model_dir: str) -> list[str] | None:
    """The chat template texts a checkpoint ships (chat_template.jinja, tokenizer_config.json,
    named templates joined); None when there is none to read."""
    folder = Path(model_dir)
    templates: list[str] = []
    if (folder / "chat_template.jinja").is_file():
        templates.append((folder / "chat_template.jinja").read_text())
    if (folder / "tokenizer_config.json").is_file():
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = " ".join(t.get("template", "") for t in template)
        if isinstance(template, str):
            templates.append(template)
    return templates or None


def template_supports_tools(model_dir: str) -> bool | None:
    """Whether the checkpoint's chat template renders `tools` (None: no template found to check)."""
    templates = chat_templates(model_dir)
    return None if templates is None else any("tools" in t for t in templates)


def template_has_thinking_switch(model_dir: str) -> bool | None:
    """Whether the checkpoint's chat template reads `enable_thinking` (None: no template
    found to check). A cheap check at configuration time; the chat format compares the
    renderings themselves when the model is loaded."""
    templates = chat_templates(model_dir)
    return None if templates is None else any("enable_thinking" in t for t in templates)
