"""Model texts in each family's tool-call format, with what we read from each and, where
vLLM's parser of that family reads it otherwise, what it reads and why we differ.

A reading is `None` (no call) or `[name, arguments]`; vLLM's is the list of every call
it returns, arguments as JSON where they decode (else the raw text). The calls are our
renderings (engines/tool_formats/) where the format is written right, and written out
by hand where it is not. Shared by the fast test of our parser (tests/engines/
test_tool_formats.py) and the parity test against vLLM's (test_tool_format_parity.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines.tool_formats import TOOL_FORMATS, tool_format
from engines.tool_formats import deepseek_v31 as ds
from engines.tool_formats import harmony as oss
from engines.tool_formats import kimi_k2 as kimi

# Why our reading differs from vLLM's on purpose.
SEVERAL = "one action a turn: several calls are refused, so the model sees its other calls never ran"
SCHEMA = "the environment runs only known tools with their required arguments in the schema's types"
UNCLOSED = "a call cut short (e.g. by the token limit) is refused, not run with what it had written so far"
RAW_ARGUMENTS = "arguments that are not a JSON object cannot be run; vLLM hands their raw text on"
MALFORMED = "markup that is not the format's is refused, where vLLM skips it or reads it loosely"


@dataclass(frozen=True)
class Case:
    fmt: str
    label: str
    text: str
    ours: list[Any] | None  # [name, arguments] we read, None: no call
    why: str = ""  # why vLLM's parser reads it otherwise; "": it reads the same
    vllm: list[list[Any]] | None = None  # what vLLM's parser reads when `why`

    @property
    def id(self) -> str:
        return f"{self.fmt}-{self.label}"

    def vllm_reading(self) -> list[list[Any]]:
        """What vLLM's parser must read: ours, or the difference stated."""
        if self.why:
            assert self.vllm is not None, self.id
            return self.vllm
        return [] if self.ours is None else [self.ours]


VIEW = ["view", {"path": "a.py"}]
PAGE = ["view", {"path": "src/m.py", "start": 10, "end": 40}]
EDIT = ["edit", {"path": "a.py", "line": 3, "body": "x = {\"k\": [1, 2]}  # <b> & 'q'\n"}]
CHANGE = ["change", {"path": "a.py", "scope": "12", "old": "a < b", "new": "a <= b"}]
BASH = ["bash", {"command": "ls -la && echo \"done\" | grep -c 'd'"}]
SUBMIT = ["submit", {}]


def _render(fmt: str, *calls: list[Any]) -> str:
    return tool_format(fmt).render([(name, args) for name, args in calls])


def _before(fmt: str, text: str) -> str:
    """Text a model writes before its call: in harmony its own (analysis) message."""
    if fmt == "harmony":
        return f"{oss.CHANNEL}analysis{oss.MESSAGE}{text}{oss.END}{oss.START}assistant"
    return text + "\n"


def _common(fmt: str) -> list[Case]:
    """The cases every format has, written in its own syntax."""
    typed = tool_format(fmt).typed_by_schema
    unknown = ["rm", {"path": "a.py"}]
    missing = ["edit", {"path": "a.py"}]
    wrong_type = ["edit", {"path": "a.py", "line": "third", "body": "y"}]
    return [
        *(Case(fmt, c[0] + ("-page" if c is PAGE else ""), _render(fmt, c), c) for c in (VIEW, PAGE, EDIT, CHANGE)),
        *(Case(fmt, c[0], _render(fmt, c), c) for c in (BASH, SUBMIT)),
        Case(fmt, "text-before", _before(fmt, "The bug is in a.py; let me look.") + _render(fmt, VIEW), VIEW),
        Case(fmt, "no-call", "view a.py", None),
        Case(fmt, "several", _render(fmt, VIEW, SUBMIT), None, SEVERAL, [VIEW, SUBMIT]),
        # GLM's parser drops a name that is not among the request's tools, as we refuse it.
        Case(
            fmt, "unknown-tool", _render(fmt, unknown), None, *(("", None) if fmt == "glm45" else (SCHEMA, [unknown]))
        ),
        Case(fmt, "missing-argument", _render(fmt, missing), None, SCHEMA, [missing]),
        Case(fmt, "wrong-type", _render(fmt, wrong_type), None, SCHEMA, [wrong_type]),
        # The XML-style formats write every value as text; the schema types it back.
        *(
            [
                Case(
                    fmt,
                    "typed-values",
                    _render(fmt, ["view", {"path": "a.py", "start": "2", "end": "5"}]),
                    ["view", {"path": "a.py", "start": 2, "end": 5}],
                )
            ]
            if typed
            else []
        ),
    ]


def _hermes() -> list[Case]:
    f = "hermes"
    return [
        Case(f, "unclosed", '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n', None, UNCLOSED, [VIEW]),
        Case(f, "bad-json", '<tool_call>\n{"name": "view", "arguments": {"path": }}\n</tool_call>', None),
        Case(f, "no-arguments-key", '<tool_call>\n{"name": "submit"}\n</tool_call>', None),
        Case(f, "one-bad-of-two", _render(f, SUBMIT) + '\n<tool_call>\n{"name": "view"\n</tool_call>', None),
    ]


def _llama3_json() -> list[Case]:
    f = "llama3_json"
    return [
        Case(f, "python-tag", "<|python_tag|>" + _render(f, VIEW), VIEW),
        Case(f, "arguments-key", '{"name": "view", "arguments": {"path": "a.py"}}', VIEW),
        Case(f, "unclosed", '{"name": "view", "parameters": {"path": "a.py"}', None),
        Case(f, "bad-json", '{"name": "view", "parameters": {"path": }}', None),
        Case(f, "stray-brace-before", "I will look at {a.py} first: " + _render(f, VIEW), None),
        Case(f, "no-name", '{"parameters": {"path": "a.py"}}', None),
    ]


def _glm45() -> list[Case]:
    f = "glm45"
    return [
        Case(
            f,
            "glm47-no-newlines",
            "<tool_call>view<arg_key>path</arg_key><arg_value>a.py</arg_value></tool_call>",
            VIEW,
        ),
        Case(f, "no-arguments", "<tool_call>submit</tool_call>", SUBMIT),
        Case(
            f,
            "unclosed",
            "<tool_call>view\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n",
            None,
            UNCLOSED,
            [VIEW],
        ),
        Case(
            f,
            "value-without-tags",
            "<tool_call>view\n<arg_key>path</arg_key>\na.py\n</tool_call>",
            None,
            MALFORMED,
            [["view", {}]],
        ),
        Case(f, "json-body", '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>', None),
    ]


def _deepseek_v31() -> list[Case]:
    f = "deepseek_v31"
    return [
        Case(
            f, "no-section-close", f'{ds.CALLS_BEGIN}{ds.CALL_BEGIN}view{ds.SEP}{{"path": "a.py"}}{ds.CALL_END}', VIEW
        ),
        Case(f, "unclosed", f'{ds.CALLS_BEGIN}{ds.CALL_BEGIN}view{ds.SEP}{{"path": "a.py"}}', None),
        Case(
            f,
            "bad-json",
            f'{ds.CALLS_BEGIN}{ds.CALL_BEGIN}view{ds.SEP}{{"path": }}{ds.CALL_END}{ds.CALLS_END}',
            None,
            RAW_ARGUMENTS,
            [["view", '{"path": }']],
        ),
        Case(
            f,
            "newline-in-call",
            f'{ds.CALLS_BEGIN}{ds.CALL_BEGIN}view{ds.SEP}{{\n"path": "a.py"}}{ds.CALL_END}{ds.CALLS_END}',
            None,
        ),
        Case(f, "no-section", f'{ds.CALL_BEGIN}view{ds.SEP}{{"path": "a.py"}}{ds.CALL_END}', None),
    ]


def _kimi_k2() -> list[Case]:
    f = "kimi_k2"
    head = f"{kimi.SECTION_BEGIN}{kimi.CALL_BEGIN}"
    return [
        Case(
            f,
            "later-index",
            f'{head}functions.view:7{kimi.ARGS_BEGIN}{{"path": "a.py"}}{kimi.CALL_END}{kimi.SECTION_END}',
            VIEW,
        ),
        Case(f, "no-section-close", f'{head}functions.view:0{kimi.ARGS_BEGIN}{{"path": "a.py"}}{kimi.CALL_END}', VIEW),
        Case(
            f, "empty-arguments", f"{head}functions.submit:0{kimi.ARGS_BEGIN}{kimi.CALL_END}{kimi.SECTION_END}", SUBMIT
        ),
        Case(
            f,
            "text-typed",
            f'{head}functions.edit:0{kimi.ARGS_BEGIN}{{"path": "a.py", "line": "3", "body": 5}}{kimi.CALL_END}',
            ["edit", {"path": "a.py", "line": 3, "body": "5"}],
        ),
        Case(f, "unclosed", f'{head}functions.view:0{kimi.ARGS_BEGIN}{{"path": "a.py"}}', None, UNCLOSED, [VIEW]),
        Case(
            f,
            "bad-json",
            f'{head}functions.view:0{kimi.ARGS_BEGIN}{{"path": }}{kimi.CALL_END}{kimi.SECTION_END}',
            None,
            RAW_ARGUMENTS,
            [["view", '{"path": }']],
        ),
        Case(
            f,
            "no-call-index",
            f'{head}functions.view{kimi.ARGS_BEGIN}{{"path": "a.py"}}{kimi.CALL_END}{kimi.SECTION_END}',
            None,
        ),
        Case(
            f,
            "no-section",
            f'{kimi.CALL_BEGIN}functions.view:0{kimi.ARGS_BEGIN}{{"path": "a.py"}}{kimi.CALL_END}',
            None,
        ),
    ]


def _qwen3_coder() -> list[Case]:
    f = "qwen3_coder"
    view = "<function=view>\n<parameter=path>\na.py\n</parameter>\n</function>"
    return [
        Case(f, "no-arguments", "<tool_call>\n<function=submit>\n</function>\n</tool_call>", SUBMIT),
        Case(f, "unclosed", f"<tool_call>\n{view}\n", None, UNCLOSED, [VIEW]),
        Case(
            f,
            "open-parameter",
            "<tool_call>\n<function=view>\n<parameter=path>\na.py\n<parameter=start>\n3\n"
            "</parameter>\n<parameter=end>\n4\n</parameter>\n</function>\n</tool_call>",
            None,
            MALFORMED,
            [["view", {"path": "a.py", "start": 3, "end": 4}]],
        ),
        Case(f, "function-outside-call", view, None, MALFORMED, [VIEW]),
        Case(f, "json-body", '<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>', None),
    ]


def _harmony() -> list[Case]:
    f = "harmony"
    view = '{"path": "a.py"}'
    return [
        Case(f, "constrain-form", f"<|channel|>commentary to=functions.view <|constrain|>json<|message|>{view}", VIEW),
        Case(f, "bare-recipient", f" to=view<|channel|>commentary json<|message|>{view}", VIEW),
        Case(f, "no-content-type", f" to=functions.view<|channel|>commentary<|message|>{view}", VIEW),
        Case(f, "call-on-analysis", f" to=functions.view<|channel|>analysis json<|message|>{view}", VIEW),
        Case(f, "final-answer", "<|channel|>final<|message|>view a.py", None),
        Case(f, "builtin-recipient", " to=python<|channel|>analysis code<|message|>print(1)", None),
        Case(f, "text-in-header", f"The bug.\n to=functions.view<|channel|>commentary json<|message|>{view}", None),
        Case(f, "unfinished-header", " to=functions.view<|channel|>commentary json", None),
        Case(
            f,
            "bad-json",
            ' to=functions.view<|channel|>commentary json<|message|>{"path": }',
            None,
            RAW_ARGUMENTS,
            [["view", '{"path": }']],
        ),
        Case(
            f,
            "code-content-type",
            " to=functions.bash<|channel|>commentary code<|message|>ls",
            None,
            RAW_ARGUMENTS,
            [["bash", "ls"]],
        ),
    ]


OWN = {
    "hermes": _hermes,
    "llama3_json": _llama3_json,
    "glm45": _glm45,
    "deepseek_v31": _deepseek_v31,
    "kimi_k2": _kimi_k2,
    "qwen3_coder": _qwen3_coder,
    "harmony": _harmony,
}
CASES: list[Case] = [case for fmt in TOOL_FORMATS for case in (*_common(fmt), *OWN[fmt]())]
