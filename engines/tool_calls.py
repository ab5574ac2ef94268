"""Native tool calls: the schema twin of the text actions in engines/protocol.py.

With `inference.tool_format` naming a family's format (engines/tool_formats/: hermes,
llama3_json, glm45, deepseek_v31, kimi_k2, qwen3_coder) the assistant calls the tools of
`TOOL_SCHEMAS`, which go to the chat template as `tools=` (engines/model/chat_format.py),
in that family's syntax; with hermes

    <tool_call>
    {"name": "view", "arguments": {"path": "a.py"}}
    </tool_call>

The call is parsed here, not by the server, so the token ids stay exactly what the model
sampled; the same parser serves SFT (`as_tool_calls`), the agent loop of rollouts and
evaluation (`protocol_text`) and stored turns read back (`parse_tool_call`). The agent
loop hands the environment the call's text action, so the environment speaks one
language; a bad call becomes an `InvalidAction` observation, as bad text does. A turn
holds exactly one call: several are refused, not cut to the first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from engines.protocol import TOOLS, Action, InvalidAction, parse_action, render_action
from engines.tool_formats import TOOL_FORMATS, hermes, tool_format

CALL_OPEN, CALL_CLOSE = hermes.OPEN, hermes.CLOSE


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


def parse_tool_call(text: str, fmt: str | None = None) -> Action | InvalidAction:
    """The action of one assistant turn holding exactly one call in format `fmt`
    (engines/tool_formats/). A turn with several calls is refused, not cut to its first:
    the environment takes one action a turn, and the model should see that its other
    calls never ran. `fmt` None reads a stored turn without its run's configuration:
    the action of the first format that reads one, else hermes's reason."""
    if fmt is None:
        return _parse_any(text)
    form = tool_format(fmt)
    calls = form.extract(text)
    if isinstance(calls, InvalidAction):
        return calls
    if not calls:
        return InvalidAction(f"no tool call; answer with {form.render([('view', {'path': 'a.py'})])}")
    if len(calls) > 1:
        return InvalidAction(f"{len(calls)} tool calls in one turn; make exactly one call a turn")
    name, args = calls[0]
    return validate_call(name, typed_arguments(name, args) if form.typed_by_schema else args)


def _parse_any(text: str) -> Action | InvalidAction:
    results = [parse_tool_call(text, name) for name in TOOL_FORMATS]
    return next((r for r in results if isinstance(r, Action)), results[0])


def typed_arguments(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """`args` typed by the tool's schema as vLLM's parsers of the XML-style families type
    them (its tool_parsers/utils.py, coerce_to_schema_type): a text that reads as an
    integer where the schema says integer, any other value as its JSON text where it says
    string. The rest stays as written, for `validate_call` to judge."""
    properties = _REQUIRED.get(name, {}).get("properties", {})
    typed = dict(args)
    for key, value in args.items():
        kind = properties.get(key, {}).get("type")
        if kind == "integer" and isinstance(value, str):
            try:
                typed[key] = int(value)
            except ValueError:
                pass
        elif kind == "string" and not isinstance(value, str):
            typed[key] = json.dumps(value, ensure_ascii=False)
    return typed


def validate_call(name: Any, args: dict[str, Any]) -> Action | InvalidAction:
    """The action of a call to tool `name` with `args`, checked against TOOL_SCHEMAS."""
    if not isinstance(name, str) or name not in _REQUIRED:
        return InvalidAction(f"unknown tool {name!r}; use one of: {', '.join(TOOLS)}")
    params = _REQUIRED[name]
    missing = [k for k in params["required"] if k not in args]
    if missing:
        return InvalidAction(f"{name}: missing argument(s) {', '.join(missing)}")
    for key, value in args.items():
        kind = params["properties"].get(key, {}).get("type")
        # bool is an int in Python, never in the schema
        wrong_int = kind == "integer" and (not isinstance(value, int) or isinstance(value, bool))
        if kind == "string" and not isinstance(value, str) or wrong_int:
            return InvalidAction(f"{name}: argument {key!r} must be {'an' if kind == 'integer' else 'a'} {kind}")
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


def tool_arguments(action: Action) -> dict[str, Any]:
    """The arguments of the call that stands for `action` (inverse of `validate_call`)."""
    if action.tool in ("test", "submit", "undo"):
        return {}
    if action.tool == "bash":
        return {"command": action.body}
    if action.tool == "view":
        args: dict[str, Any] = {"path": action.path}
        args |= {"start": action.line, "end": action.end_line} if action.line is not None else {}
        return args | ({"function": action.scope} if action.scope else {})
    if action.tool == "edit":
        return {"path": action.path, "line": action.line, "body": action.body}
    if action.tool == "replace":
        return {"path": action.path, "old": action.old, "new": action.new}
    scope = str(action.line) if action.line is not None else action.scope
    return {"path": action.path, "scope": scope, "old": action.old, "new": action.new}


def render_tool_call(action: Action, fmt: str = "hermes") -> str:
    """Inverse of `parse_tool_call`: the call of an action in format `fmt` (oracle demonstrations)."""
    return tool_format(fmt).render([(action.tool, tool_arguments(action))])


def protocol_text(text: str, fmt: str = "hermes") -> str | InvalidAction:
    """The text action (engines/protocol.py) a tool-call turn stands for, or why it is none."""
    action = parse_tool_call(text, fmt)
    return action if isinstance(action, InvalidAction) else render_action(action)


def as_tool_calls(messages: list[dict], where: str = "conversation", fmt: str = "hermes") -> list[dict]:
    """`messages` with each assistant turn written as a text action rewritten as its call
    in format `fmt` (turns already holding a valid call kept). Raises ValueError naming
    the message that is neither."""
    out = []
    for i, m in enumerate(messages):
        content = str(m.get("content") or "")
        if m.get("role") == "assistant":
            action = parse_action(content)
            if isinstance(action, Action):
                m = {**m, "content": render_tool_call(action, fmt)}
            elif isinstance(call := parse_tool_call(content, fmt), InvalidAction):
                raise ValueError(
                    f"{where}, message {i}: assistant turn is neither a tool call nor a text action "
                    f"({action.message}; as a {fmt} call: {call.message}); write it as "
                    f"{render_tool_call(Action('test'), fmt)} or in engines/protocol.py's language"
                )
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


# What each family's template writes for a call, checked in this order (Qwen3-Coder's and
# GLM's calls sit inside <tool_call> too; Llama 3.1's are bare JSON with "parameters").
_CALL_MARKS = (
    ("harmony", "<|call|>"),
    ("glm45", "<arg_key>"),
    ("qwen3_coder", "<function="),
    ("deepseek_v31", "<｜tool▁call▁begin｜>"),
    ("kimi_k2", "<|tool_call_begin|>"),
    ("hermes", "<tool_call>"),
    ("llama3_json", '"parameters": '),
)


def template_tool_format(templates: list[str] | None) -> str:
    """The tool-call format the chat template writes calls in (inference.tool_format
    'auto'), or 'text' for a template that writes none or does not list tools."""
    text = " ".join(templates or [])
    if "tools" not in text:
        return "text"
    return next((name for name, mark in _CALL_MARKS if mark in text), "text")


def template_supports_tools(model_dir: str) -> bool | None:
    """Whether the checkpoint's chat template renders `tools` (None: no template found to check)."""
    templates = chat_templates(model_dir)
    return None if templates is None else any("tools" in t for t in templates)


def template_has_thinking_switch(model_dir: str) -> bool | None:
    """Whether the checkpoint's chat template reads `enable_thinking` (Qwen3, GLM) or
    `thinking` (DeepSeek-V3.1) (None: no template found to check). A cheap check at
    configuration time; the chat format compares the renderings themselves when the
    model is loaded."""
    templates = chat_templates(model_dir)
    return None if templates is None else any(_reads_thinking_switch(t) for t in templates)


# Jinja tags ({% ... %}, {{ ... }}), the string literals inside them, and either switch as a
# variable: not a message's field (message.thinking, "thinking" in message, gpt-oss's).
_JINJA_TAG = re.compile(r"\{[{%](.*?)[%}]\}", re.S)
_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
_THINKING_VARIABLE = re.compile(r"(?<![.\w])(enable_)?thinking\b")


def _reads_thinking_switch(template: str) -> bool:
    return any(_THINKING_VARIABLE.search(_STRING.sub("", tag)) for tag in _JINJA_TAG.findall(template))
