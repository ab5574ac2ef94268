"""`tandem sft` on models of two other chat-template families (tests/chat_models.py):
the demonstrations are rendered in the model's own template, the loss falls on the
assistant turns, and the fine-tuned folder keeps the template for serving. With hermes
calls (`--tool-format auto`, the default, on a template that writes them) the template
lists the tools and the turns are learned as calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from engines.model.chat_format import ChatFormat
from engines.model.load import load_tokenizer
from engines.protocol import Action
from engines.tool_calls import TOOL_SCHEMAS, as_tool_calls, render_tool_call
from flows.cli import app
from tests.chat_models import FAMILIES, build_chat_model

pytestmark = pytest.mark.chat_template

CONVERSATIONS = [
    [
        {"role": "user", "content": f"def add(a, b):\n    return a - b  # case {i}"},
        {"role": "assistant", "content": "edit m.py 2\n    return a + b"},
        {"role": "tool", "content": "edited m.py line 2"},
        {"role": "assistant", "content": "submit"},
    ]
    for i in range(16)
]


def tandem_sft(model_dir: Path, out: Path, *extra: str, steps: int = 20) -> Result:
    """`tandem sft` of `model_dir` on CONVERSATIONS into `out` for `steps` steps, with the extra options."""
    data = out.parent / "demos.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    args = ["sft", "--model", str(model_dir), "--data", str(data), "--out", str(out)]
    args += ["--sft.max_steps", str(steps), "--sft.batch_size", "8", "--sft.log_every", "10"]
    args += ["--sft.lr", "3e-3", *extra]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_tandem_sft_trains_in_the_models_own_template(name: str, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    text = ("--tool-format", "text")  # the ChatML template writes hermes calls: 'auto' would train those
    result = tandem_sft(build_chat_model(name, tmp_path / name), out, "--seq_len", "400", *text, steps=30)
    assert result.exit_code == 0, result.output
    losses = [float(x) for x in re.findall(r"\[sft\] step \d+ loss ([0-9.]+)", result.output)]
    assert len(losses) >= 3 and losses[-1] < 0.5 * losses[0], result.output
    tok = load_tokenizer(out)
    assert tok.chat_template == FAMILIES[name].template  # served and trained on in the same template
    chat = ChatFormat.from_tokenizer(tok, out)
    ids, mask = chat.conversation(CONVERSATIONS[0])
    end = FAMILIES[name].end_of_turn
    learned = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert learned == f"edit m.py 2\n    return a + b{end}submit{end}"


def test_tandem_sft_with_tool_calls_trains_the_calls_with_the_tools_listed(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    hermes = ("--tool-format", "hermes")
    result = tandem_sft(build_chat_model("chatml", tmp_path / "chatml"), out, "--seq_len", "1024")
    assert result.exit_code == 0, result.output
    assert "tool format hermes" in result.output  # 'auto', the default: the calls the template writes
    chat = ChatFormat.from_tokenizer(load_tokenizer(out), out, tools=TOOL_SCHEMAS)
    ids, mask = chat.conversation(as_tool_calls(CONVERSATIONS[0]))
    assert '"name": "submit"' in chat.tokenizer.decode(ids[:-20])  # the tools were in the prompt it learned from
    learned = chat.tokenizer.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    edit = Action("edit", path="m.py", line=2, body="    return a + b")
    assert learned == f"{render_tool_call(edit)}<|im_end|>{render_tool_call(Action('submit'))}<|im_end|>"
    # A template that would not show the tools is refused before any step.
    llama3 = build_chat_model("llama3", tmp_path / "llama3")
    result = tandem_sft(llama3, tmp_path / "x", *hermes)
    assert result.exit_code == 1 and "does not render the tools it is given" in result.output, result.output
    bad = tandem_sft(llama3, tmp_path / "x", "--tool-format", "json")
    assert bad.exit_code != 0 and "--tool-format" in bad.output, bad.output
