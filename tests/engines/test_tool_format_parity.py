"""Parity of our tool-call parsers with vLLM's: every model text of
tests/engines/tool_format_cases.py, valid and malformed, is read by vLLM's parser of the
same family name (the one a served model meets, `--tool-call-parser NAME`; for harmony,
gpt-oss's, the HarmonyParser vLLM composes for it, on the harmony encoding's ids of the
text and the <|call|> that ended it) in the vLLM environment, with the tools of this project in the request as a served run would send
them, and must give the calls we read (no call where we read none), or the difference
the case states with its reason. One vLLM process reads every text; its tokenizer is a
small local one holding each family's special tokens, as the parsers look them up."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from engines.model.tokenizer import train_tokenizer
from engines.tool_calls import TOOL_SCHEMAS
from engines.tool_formats import deepseek_v31, glm45, harmony, hermes, kimi_k2, llama3_json
from tests.engines.tool_format_cases import CASES, Case

pytestmark = [pytest.mark.chat_template, pytest.mark.slow]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    hermes.OPEN,
    hermes.CLOSE,
    "<think>",
    "</think>",
    glm45.KEY,
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    llama3_json.PYTHON_TAG,
    deepseek_v31.CALLS_BEGIN,
    deepseek_v31.CALLS_END,
    deepseek_v31.CALL_BEGIN,
    deepseek_v31.SEP,
    deepseek_v31.CALL_END,
    kimi_k2.SECTION_BEGIN,
    kimi_k2.SECTION_END,
    kimi_k2.CALL_BEGIN,
    kimi_k2.ARGS_BEGIN,
    kimi_k2.CALL_END,
]

# Runs in the vLLM environment: reads {"tokenizer", "tools", "cases": [[parser, text]]}
# on stdin, prints per case the calls [[name, arguments text]] or {"error": ...}.
PROBE = """
import json, sys
from transformers import AutoTokenizer
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.tool_parsers import ToolParserManager, register_lazy_tool_parsers

register_lazy_tool_parsers()
job = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(job["tokenizer"])


class HarmonyTokens:  # gpt-oss's parser reads the harmony encoding's ids, and decodes them on error
    def __init__(self):
        from vllm.entrypoints.openai.parser.harmony_utils import get_encoding
        self.encoding = get_encoding()

    def decode(self, ids):
        return self.encoding.decode(ids)


def harmony_calls(text, request):
    from vllm.parser.parser_manager import ParserManager
    cls = ParserManager.get_parser("openai", "openai_gptoss", enable_auto_tools=True, is_harmony=True)
    tokens = HarmonyTokens()
    ids = tokens.encoding.encode(text, allowed_special="all")
    _, _, calls = cls(tokens, request.tools).parse("", request, enable_auto_tools=True, model_output_token_ids=ids)
    return [[c.name, c.arguments] for c in calls or []]


out = []
for name, text in job["cases"]:
    request = ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], model="m", tools=job["tools"])
    try:
        if name == "harmony":
            out.append(harmony_calls(text + job["harmony_stop"], request))
            continue
        parser = ToolParserManager.get_tool_parser(name)(tokenizer, request.tools)
        info = parser.extract_tool_calls(text, parser.adjust_request(request))
        out.append([[c.function.name, c.function.arguments] for c in info.tool_calls])
    except Exception as err:
        out.append({"error": repr(err)})
print(json.dumps(out))
"""


def _arguments(text: str) -> Any:
    """A call's arguments as JSON where they decode, else the raw text vLLM handed on."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@pytest.fixture(scope="module")
def vllm_reads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = os.environ.get("TANDEM_VLLM_PYTHON")
    if not python:
        pytest.fail("TANDEM_VLLM_PYTHON must name the vLLM environment's python (scripts/setup.sh)")
    folder = tmp_path_factory.mktemp("tool-tokenizer")
    texts = [c.text for c in CASES]
    tok = train_tokenizer(texts, 512, SPECIAL_TOKENS, "{{ messages }}", "<|endoftext|>", "<|endoftext|>")
    tok.save_pretrained(str(folder))
    job = {
        "tokenizer": str(folder),
        "tools": TOOL_SCHEMAS,
        "cases": [[c.fmt, c.text] for c in CASES],
        "harmony_stop": harmony.CALL,  # the server's output ids end with the stop id the model sampled
    }
    proc = subprocess.run([python, "-c", PROBE], input=json.dumps(job), capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {c.id: r for c, r in zip(CASES, results, strict=True)}


@pytest.mark.timeout(900)  # importing vLLM takes minutes on a busy host
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_vllm_reads_each_text_as_we_do_or_as_stated(case: Case, vllm_reads: dict[str, Any]) -> None:
    read = vllm_reads[case.id]
    assert not isinstance(read, dict), f"vLLM's {case.fmt} parser failed: {read['error']}"
    calls = [[name, _arguments(args)] for name, args in read]
    assert calls == case.vllm_reading(), f"differs from ours ({case.why or 'no difference stated'})"
