"""Whether a model copies: the share of copy drills (engines/env/task_sources/copy_drills.py)
whose answer, the `view` of the file and function the hint names, it writes exactly.

The copying circuit forms in a phase change (the drill loss leaves a plateau and falls by
a factor of 20): a drill phase that ends before it leaves a model that writes the hint's
first character and makes up the rest, and every figure built on it is zero
(docs/2026-12-06-real-task-gate.md, X17)."""

from __future__ import annotations

import torch

from engines.model.greedy import greedy_turns
from engines.model.load import load_moe_causal_lm, load_tokenizer


def copied_share(model_dir: str, drills: list[list[dict[str, str]]], batch: int = 32) -> tuple[float, list[str]]:
    """The share of `drills` (a statement, then the answer) the model in `model_dir` answers
    exactly, greedy, and up to three of its misses as `'written' for 'wanted'`."""
    model, tokenizer = load_moe_causal_lm(model_dir), load_tokenizer(model_dir)
    model.eval()
    wanted = [d[-1]["content"] for d in drills]
    with torch.no_grad():
        written = greedy_turns(model, tokenizer, [d[:-1] for d in drills], max_new=64, batch=batch)
    hits = [w.strip() == a for w, a in zip(written, wanted)]
    misses = [f"{w.strip()!r} for {a!r}" for w, a, hit in zip(written, wanted, hits) if not hit]
    return sum(hits) / max(1, len(drills)), misses[:3]
