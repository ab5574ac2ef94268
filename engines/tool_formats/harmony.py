"""gpt-oss's harmony format (vLLM's `openai` tool parser, read through openai_harmony).

A model turn is one or more messages, written after the generation prompt
`<|start|>assistant` and closed by a stop token the server drops from the text:

    <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant to=functions.view<|channel|>commentary json<|message|>{"path": "a.py"}

`<|return|>` ends a turn whose last message is a final answer (`<|channel|>final`),
`<|call|>` one whose last message is addressed to a function (`to=functions.NAME`), and
`<|end|>` closes every earlier message. The published template (openai/gpt-oss-20b,
chat_template.jinja) writes a call's recipient before the channel and `json` after it,
as above; the model may also write it after the channel with `<|constrain|>json`
(`<|channel|>commentary to=functions.view <|constrain|>json<|message|>`), which
openai_harmony reads the same. Both are read; calls are written the template's way.

As vLLM's harmony parser reads a turn: every message addressed to a function is a call,
whatever its channel (a recipient without the `functions.` prefix too, unless it is one
of the built-in tools); analysis messages are reasoning; final messages, and commentary
messages to no one, are the answer. Unlike vLLM, a message cut before its `<|message|>`
or a message of another role inside the turn makes the whole turn unreadable rather
than skipped token by token, and so does text in a header beside its recipient,
channel and content type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engines.protocol import InvalidAction
from engines.tool_formats.base import Call, ToolFormat, json_arguments

START, END, MESSAGE = "<|start|>", "<|end|>", "<|message|>"
CHANNEL, CONSTRAIN = "<|channel|>", "<|constrain|>"
RETURN, CALL = "<|return|>", "<|call|>"
ASSISTANT = "assistant"
FUNCTIONS = "functions."
# Recipients openai_harmony keeps for its built-in tools (vLLM's harmony_utils.py): not function calls.
BUILTIN = ("python", "browser", "container")


@dataclass(frozen=True)
class Message:
    """One message of a turn: its header's parts and its content, and its text as written."""

    channel: str | None
    recipient: str | None
    content_type: str | None
    content: str
    text: str

    @property
    def function(self) -> str | None:
        """The function this message calls, or None (vLLM's is_function_recipient)."""
        r = self.recipient
        if not r or r.startswith("<|") or r == ASSISTANT or r.split(".", 1)[0] in BUILTIN:
            return None
        if r.startswith(FUNCTIONS):
            return r[len(FUNCTIONS) :] or None
        return r


def messages(turn: str) -> list[Message] | InvalidAction:
    """The messages of a model turn (what follows `<|start|>assistant`, without its stop
    token), or why the turn cannot be read."""
    out: list[Message] = []
    pieces = turn.split(START)
    for k, piece in enumerate(pieces):
        text = piece if k == 0 else START + piece
        if k > 0:
            if not piece.startswith(ASSISTANT):
                return InvalidAction(f"a message of another role ({piece[:20]!r}) inside your turn")
            piece = piece[len(ASSISTANT) :]
        if k < len(pieces) - 1:
            if not piece.endswith(END):
                return InvalidAction(f"a message not closed with {END} before the next {START}")
            piece = piece[: -len(END)]
        header, sep, content = piece.partition(MESSAGE)
        if not sep:
            return InvalidAction(f"a message header never reached {MESSAGE}: write <|channel|>final{MESSAGE}TEXT")
        message = _message(header, content, text)
        if isinstance(message, InvalidAction):
            return message
        out.append(message)
    return out


def _message(header: str, content: str, text: str) -> Message | InvalidAction:
    """A message from its header (`to=R<|channel|>C TYPE` or `<|channel|>C to=R <|constrain|>TYPE`):
    a recipient, a channel, at most one content type, nothing else."""
    before, sep, after = header.partition(CHANNEL)
    words = before.split() + (after.replace(CONSTRAIN, " ").split() if sep else [])
    recipients = [w[3:] for w in words if w.startswith("to=")]
    rest = [w for w in words if not w.startswith("to=")]
    if len(recipients) > 1 or any(not w.startswith("to=") for w in before.split()) or not sep or len(rest) > 2:
        return InvalidAction(f"malformed message header {header[:60]!r}: write <|channel|>NAME[ to=RECIPIENT]")
    return Message(
        rest[0] if rest else None, recipients[0] if recipients else None, " ".join(rest[1:]) or None, content, text
    )


def split(turn: str) -> tuple[str, list[Message]] | InvalidAction:
    """(reasoning, the other messages) of a turn: the analysis messages that call no
    function are its reasoning, as written; the rest are what it does."""
    read = messages(turn)
    if isinstance(read, InvalidAction):
        return read
    reasoning = "".join(m.text for m in read if m.channel == "analysis" and m.function is None)
    return reasoning, [m for m in read if not (m.channel == "analysis" and m.function is None)]


def answer(turn: str) -> str | InvalidAction:
    """A turn's answer in text (inference.tool_format 'text'): its last final message's
    content, or a commentary message to no one where there is no final one."""
    parts = split(turn)
    if isinstance(parts, InvalidAction):
        return parts
    said = [m for m in parts[1] if m.function is None and m.channel in ("final", "commentary")]
    finals = [m for m in said if m.channel == "final"] or said
    if not finals:
        return InvalidAction(f"no answer: end your turn with {CHANNEL}final{MESSAGE}ACTION")
    return finals[-1].content


def extract(text: str) -> list[Call] | InvalidAction:
    """Every call of a turn: the messages addressed to a function, arguments JSON. A
    text with no message in it holds no call."""
    if MESSAGE not in text:
        return []
    read = messages(text)
    if isinstance(read, InvalidAction):
        return read
    calls: list[Call] = []
    for m in read:
        if m.function is None:
            continue
        if m.content_type is not None and "json" not in m.content_type:
            return InvalidAction(
                f"call to {m.recipient} has content type {m.content_type!r}: write its arguments as json"
            )
        args = json_arguments(m.content)
        if isinstance(args, InvalidAction):
            return args
        calls.append((m.function, args))
    return calls


def render(calls: list[Call]) -> str:
    """Calls as the template writes them after `<|start|>assistant` (several: each its own message)."""
    return f"{END}{START}{ASSISTANT}".join(
        f" to={FUNCTIONS}{name}{CHANNEL}commentary json{MESSAGE}{json.dumps(args, ensure_ascii=False)}"
        for name, args in calls
    )


def as_final(text: str) -> str:
    """A text answer as the final message the model writes after `<|start|>assistant`."""
    return f"{CHANNEL}final{MESSAGE}{text}"


def called_function(turn: str) -> str | None:
    """The function a turn's last message calls (so `<|call|>` ends it), or None."""
    read = messages(turn)
    return None if isinstance(read, InvalidAction) or not read else read[-1].function


FORMAT = ToolFormat(extract, render)
