"""The copy check (engines/model/copy_check.py): the share of drills a model answers exactly."""

from __future__ import annotations

from pathlib import Path

from engines.env.task_sources.copy_drills import copy_drills
from engines.model.copy_check import copied_share
from engines.model.greedy import greedy_turns
from engines.model.load import load_moe_causal_lm, load_tokenizer


def test_the_share_counts_the_drills_answered_exactly(tiny_model_dir: Path) -> None:
    drills = copy_drills(4, seed=0, statement="short")
    share, misses = copied_share(str(tiny_model_dir), drills)
    assert share == 0.0 and len(misses) == 3  # a fresh model copies nothing
    assert all(" for 'view " in m for m in misses)
    # Drills whose answers are what the model writes: every one counts, whatever it wrote.
    model, tokenizer = load_moe_causal_lm(str(tiny_model_dir)), load_tokenizer(str(tiny_model_dir))
    written = greedy_turns(model, tokenizer, [d[:-1] for d in drills], max_new=64)
    echoed = [[d[0], {"role": "assistant", "content": w.strip()}] for d, w in zip(drills, written)]
    echoed[0][1]["content"] += " x"  # and one it does not write
    assert copied_share(str(tiny_model_dir), echoed) == (
        0.75,
        [f"{written[0].strip()!r} for {written[0].strip() + ' x'!r}"],
    )
