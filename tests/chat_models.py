"""Tiny random MoE models of two families, each with a locally trained tokenizer that
carries a chat template of another family, written here (no downloads):

- qwen3_moe + ChatML (`<|im_start|>role\\n...<|im_end|>\\n`, tool results as a user turn
  in `<tool_response>` tags, as Qwen's templates do). Its generation config names
  `<|im_end|>`, so the server stops there by itself.
- mixtral + Llama-3 headers (`<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`,
  a `<|begin_of_text|>` the template writes). Its tokenizer's and generation config's
  eos is `<|end_of_text|>`: the end of a turn, `<|eot_id|>`, must come from the chat
  format (sent as a stop id).

Built by `build_chat_model(family, out)` in a couple of seconds; tests share one per
family (module- or session-scoped fixtures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    '</tools>\nCall a tool as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LLAMA3_TEMPLATE = (
    "<|begin_of_text|>"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@dataclass(frozen=True)
class TemplateFamily:
    family: str  # engines/model/families.py
    template: str
    special_tokens: tuple[str, ...]
    eos: str  # the tokenizer's eos token
    pad: str
    bos: str | None
    generation_eos: tuple[str, ...]  # generation_config.json eos ids
    end_of_turn: str  # what closes an assistant turn in the template


FAMILIES: dict[str, TemplateFamily] = {
    "chatml": TemplateFamily(
        "qwen3_moe",
        CHATML_TEMPLATE,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        eos="<|im_end|>",
        pad="<|endoftext|>",
        bos=None,
        generation_eos=("<|im_end|>", "<|endoftext|>"),
        end_of_turn="<|im_end|>",
    ),
    "llama3": TemplateFamily(
        "mixtral",
        LLAMA3_TEMPLATE,
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|pad|>"),
        eos="<|end_of_text|>",
        pad="<|pad|>",
        bos="<|begin_of_text|>",
        generation_eos=("<|end_of_text|>",),
        end_of_turn="<|eot_id|>",
    ),
}
# The family whose run also carries the trackers (tests/flows/test_trackers.py), one run for both.
TRACKED_FAMILY = "chatml"


def _texts() -> list[str]:
    import json

    from engines.env.micro import generate_micro_tasks
    from engines.model.chat_format import SYSTEM_PROMPT, TOOL_CALL_SYSTEM_PROMPT
    from engines.tool_calls import TOOL_SCHEMAS

    problems = [t.problem_statement for t in generate_micro_tasks(30, seed=5)]
    words = ["view m.py\n", "edit m.py 3\n    return x - 1\n", "submit", "test", "FAILED test_m.py::test_add\n"]
    # The tool schemas as the ChatML template lists them, so a prompt with tools fits 512 positions.
    tools = [TOOL_CALL_SYSTEM_PROMPT, *(json.dumps(t) for t in TOOL_SCHEMAS)]
    return [SYSTEM_PROMPT, *tools, *problems, *words] * 20


def build_chat_model(name: str, out: Path) -> Path:
    """A random tiny MoE of `FAMILIES[name]`, its tokenizer and template, saved to `out`."""
    from engines.model.families import build_tiny
    from engines.model.tokenizer import train_tokenizer
    from engines.trainer.export import export_weights

    spec = FAMILIES[name]
    tok = train_tokenizer(
        _texts(), 1024, spec.special_tokens, spec.template, eos_token=spec.eos, pad_token=spec.pad, bos_token=spec.bos
    )
    model = build_tiny(spec.family, vocab_size=len(tok), seed=1)
    # Room for a prompt that lists the tool schemas (about 650 tokens); default rope has no table to resize.
    model.config.max_position_embeddings = 1024
    model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(t) for t in spec.generation_eos]
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    export_weights(model, tok, str(out), "fp32")
    return out
