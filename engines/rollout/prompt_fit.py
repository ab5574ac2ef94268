"""Whether a run's episodes can start at all: every task's first prompt, in the served
model's tokens, leaves room for a model turn within the episode's token budget.

Checked before any server starts. A run whose prompts do not fit would otherwise end
every episode before its first token (finish reason "error"), train on nothing and
report a zero pass rate as if it had measured one.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from engines.env.types import Task
from engines.model.chat_format import ChatFormat


def prompt_lengths(chat: ChatFormat, tasks: Sequence[Task]) -> list[int]:
    """Tokens of each task's first prompt (system prompt, problem statement, generation prompt)."""
    return [len(chat.prompt_ids(chat.first_messages(t.problem_statement))) for t in tasks]


def check_prompts_fit(chat: ChatFormat, tasks: Sequence[Task], max_total_tokens: int, turn_tokens: int) -> None:
    """Raise ValueError, with the measured prompt lengths, when a task's prompt leaves fewer
    than `turn_tokens` (one turn's budget, or less) of `max_total_tokens`."""
    if not tasks:
        return
    lengths = prompt_lengths(chat, tasks)
    room = min(turn_tokens, max_total_tokens // 2)
    over = sorted(((n, t.instance_id) for n, t in zip(lengths, tasks) if n + room > max_total_tokens), reverse=True)
    if not over:
        return
    longest = ", ".join(f"{ident} ({n})" for n, ident in over[:3])
    raise ValueError(
        f"{len(over)} of {len(tasks)} task prompts leave no room for a {room}-token turn within "
        f"inference.limits.max_total_tokens = {max_total_tokens}: prompt tokens min {min(lengths)}, median "
        f"{int(statistics.median(lengths))}, max {max(lengths)}; longest: {longest}. Raise "
        f"inference.limits.max_total_tokens (and inference.max_model_len) to at least {over[0][0] + room}, or use "
        "shorter problem statements"
    )
