"""The agent protocol: how a model turn names a tool, and how turns are framed.

This is the contract between the environment (which executes actions), the agent
loop (which parses model text into actions) and the trainer (which renders oracle
demonstrations for SFT). It is deliberately small so a tiny model can learn it.

A conversation is a sequence of turns framed by special tokens:

    <|user|>PROBLEM<|end|><|assistant|>ACTION<|end|><|tool|>OBSERVATION<|end|><|assistant|>...

The model produces ACTION text and stops at `<|end|>`. An ACTION is a first line
naming the tool and its arguments, then an optional body:

    view PATH [START-END]     show numbered lines of a file, a page at a time
                              (`view PATH START END` is read the same)
    view PATH NAME            show the numbered lines of one function or class;
                              NAME may be qualified: Class.method, outer.inner
    edit PATH LINE            replace line LINE (1-based) with the body's lines
    <replacement line(s)>
    replace PATH              str_replace: body is OLD, a line '=====', then NEW
    <old text>
    =====
    <new text>
    change PATH SCOPE         replace OLD (once in SCOPE: a line number or a NAME as
    <old text>                for view) by NEW; both one line, OLD often a single token
    <new text>
    undo                      revert the last edit still in place
    bash                      run the body as a shell command in the sandbox
    <command>
    test                      run the task's visible tests
    submit                    end the episode; the environment takes the diff

Text that does not parse is not a crash: `parse_action` returns an `InvalidAction`
whose message becomes the observation, and the episode goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Special tokens (added to every tokenizer this project trains).
PAD = "<|pad|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL = "<|tool|>"
END = "<|end|>"
SPECIAL_TOKENS = [PAD, USER, ASSISTANT, TOOL, END]

Role = Literal["user", "assistant", "tool"]
ROLE_TOKEN: dict[str, str] = {"user": USER, "assistant": ASSISTANT, "tool": TOOL}

# Jinja chat template equivalent to `render_messages`, stored in tokenizer_config.json
# so transformers and vLLM render conversations the same way.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

REPLACE_SEPARATOR = "====="
TOOLS = ("view", "edit", "replace", "change", "undo", "bash", "test", "submit")
EDIT_TOOLS = ("edit", "replace", "change")  # the tools that change a file (attempts under edit feedback)


@dataclass(frozen=True)
class Action:
    tool: Literal["view", "edit", "replace", "change", "undo", "bash", "test", "submit"]
    path: str | None = None
    line: int | None = None  # edit: 1-based line; view: start line; change: the line scope
    end_line: int | None = None  # view: last line shown
    body: str = ""  # edit: replacement; bash: command
    old: str = ""  # replace, change
    new: str = ""  # replace, change
    scope: str = ""  # change: the function or class scope (when `line` is None); view: the one shown


@dataclass(frozen=True)
class InvalidAction:
    message: str  # shown to the model as the observation


def parse_action(text: str) -> Action | InvalidAction:
    """Parse one model turn (without the trailing `<|end|>`)."""
    head, _, body = text.strip("\n").partition("\n")
    words = head.split()
    if not words:
        return InvalidAction(f"empty action; start with one of: {', '.join(TOOLS)}")
    tool, args = words[0], words[1:]
    if tool not in TOOLS:
        return InvalidAction(f"unknown tool {tool!r}; use one of: {', '.join(TOOLS)}")
    if tool in ("test", "submit", "undo"):
        return Action(tool)
    if tool == "bash":
        command = body or " ".join(args)
        return Action("bash", body=command) if command.strip() else InvalidAction("bash: give a command")
    if not args:
        return InvalidAction(f"{tool}: give a file path")
    path = args[0]
    if tool == "view":
        return _view(path, args[1:])
    if tool == "edit":
        if len(args) != 2 or not args[1].isdigit() or int(args[1]) < 1:
            return InvalidAction("usage: edit PATH LINE, then the new line(s) below")
        return Action("edit", path=path, line=int(args[1]), body=body)
    if tool == "change":
        return _change(path, args[1:], body)
    # replace
    old, sep, new = body.partition("\n" + REPLACE_SEPARATOR + "\n")
    if not sep:
        return InvalidAction(f"replace: separate old and new text with a line '{REPLACE_SEPARATOR}'")
    return Action("replace", path=path, old=old, new=new)


def is_qualified_name(text: str) -> bool:
    """`name` or `Class.method` (dotted identifiers): what `view` and `change` take as a scope."""
    return all(part.isidentifier() for part in text.split("."))


def _view(path: str, args: list[str]) -> Action | InvalidAction:
    usage = "usage: view PATH [START-END | NAME], NAME a function or class (Class.method)"
    if not args:
        return Action("view", path=path)
    span = args[0].split("-") if len(args) == 1 and "-" in args[0] else args
    if len(span) == 2 and all(p.isdigit() for p in span):
        start, end = int(span[0]), int(span[1])
        if start < 1 or end < start:
            return InvalidAction(f"view: give lines START-END with 1 <= START <= END (got {start}-{end})")
        return Action("view", path=path, line=start, end_line=end)
    if len(args) == 1 and args[0].isdigit():
        return Action("view", path=path, line=max(1, int(args[0])))
    if len(args) == 1 and is_qualified_name(args[0]):
        return Action("view", path=path, scope=args[0])
    return InvalidAction(usage)


def _change(path: str, args: list[str], body: str) -> Action | InvalidAction:
    usage = "usage: change PATH LINE_OR_FUNCTION, then OLD on one line and NEW on the next"
    parts = body.split("\n")
    if len(args) != 1 or len(parts) != 2 or not parts[0]:
        return InvalidAction(usage)
    scope, (old, new) = args[0], parts
    if scope.isdigit():
        return (
            Action("change", path=path, line=int(scope), old=old, new=new) if int(scope) >= 1 else InvalidAction(usage)
        )
    if not is_qualified_name(scope):
        return InvalidAction(f"change: SCOPE {scope!r} is neither a line number nor a name (function, Class.method)")
    return Action("change", path=path, scope=scope, old=old, new=new)


def render_action(action: Action) -> str:
    """Inverse of `parse_action`: the canonical text of an action (oracle demonstrations)."""
    if action.tool in ("test", "submit", "undo"):
        return action.tool
    if action.tool == "bash":
        return f"bash\n{action.body}"
    if action.tool == "view":
        if action.line is not None:
            end = action.end_line if action.end_line is not None else action.line
            return f"view {action.path} {action.line}-{end}"
        return f"view {action.path}" + (f" {action.scope}" if action.scope else "")
    if action.tool == "edit":
        return f"edit {action.path} {action.line}\n{action.body}"
    if action.tool == "change":
        scope = action.line if action.line is not None else action.scope
        return f"change {action.path} {scope}\n{action.old}\n{action.new}"
    return f"replace {action.path}\n{action.old}\n{REPLACE_SEPARATOR}\n{action.new}"


def render_messages(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """Python twin of CHAT_TEMPLATE (tested to agree with the Jinja version)."""
    text = "".join(f"{ROLE_TOKEN[m['role']]}{m['content']}{END}" for m in messages)
    return text + (ASSISTANT if add_generation_prompt else "")
