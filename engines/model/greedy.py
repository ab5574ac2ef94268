"""Greedy next turns of the project's chat format with transformers `generate`, in-process:
what the warm-start checks and the edit-gate benchmarks read a model's answers with."""

from __future__ import annotations

from typing import Any

from engines.protocol import END, render_messages


def greedy_turns(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, str]]],
    max_new: int = 48,
    batch: int = 64,
) -> list[str]:
    """The next assistant turn of each conversation, greedy, without its `<|end|>`."""
    end = tokenizer.convert_tokens_to_ids(END)
    tokenizer.padding_side = "left"
    out: list[str] = []
    for i in range(0, len(conversations), batch):
        texts = [render_messages(c, add_generation_prompt=True) for c in conversations[i : i + batch]]
        enc = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        ids = model.generate(
            **enc,
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=end,
            pad_token_id=tokenizer.pad_token_id,
        )
        for row in ids[:, enc["input_ids"].shape[1] :].tolist():
            row = row[: row.index(end)] if end in row else row
            out.append(tokenizer.decode(row, skip_special_tokens=True))
    return out
