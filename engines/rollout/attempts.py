"""What an edit-feedback episode did, read back from its conversation text.

Under edit feedback (engines/env/feedback.py) every failing edit is followed by an
observation that ends in `reverted (attempt i of N)`; a passing edit ends the
episode, so it has no observation and shows only as the episode being resolved.
From the text alone (so it works on stored trajectories too) this recovers the
number of attempts, whether the first one passed, and how often a retry repeated
an edit that had already failed: the behaviours the evaluation reports beside
pass@1. A turn counts by the action it stands for, whatever the run's format: a text
action, or a tool call in any family's format (engines/tool_formats/) read as its text action,
with a thinking model's reasoning set aside (`turn_action`). Two evaluations of the same
tasks are compared pairwise: McNemar's exact test (`mcnemar_p`) and a paired-bootstrap
interval of the gain (`paired_bootstrap_interval`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from engines.model.chat_format import split_reasoning
from engines.protocol import ASSISTANT, EDIT_TOOLS, END, TOOL, Action, InvalidAction, parse_action
from engines.tool_calls import CALL_OPEN, parse_tool_call
from engines.tool_formats import harmony

_REVERTED = re.compile(r"\nreverted \(attempt \d+ of \d+\)$")
_TURN = re.compile(
    re.escape(ASSISTANT) + r"(.*?)" + re.escape(END) + r"(?:" + re.escape(TOOL) + r"(.*?)" + re.escape(END) + ")?", re.S
)


@dataclass(frozen=True)
class AttemptStats:
    attempts: int  # edits tested (failed ones plus the passing one)
    first_passed: bool
    repeats: int  # attempts identical to an earlier failed attempt


def conversation_turns(conversation: str) -> list[tuple[str, str]]:
    """(action, observation) of each model turn of a conversation in this project's own
    framing (the tiny model's, as stored trajectories hold it); observation '' when none followed."""
    return _TURN.findall(conversation)


def message_turns(messages: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(action, observation) of each assistant message, whatever chat template framed them.
    The observation is the message after it in whichever role the template rendered it
    (`tool`, or `user` where it has no tool role: ChatFormat.observation_role)."""
    turns = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            after = messages[i + 1] if i + 1 < len(messages) else None
            observed = after is not None and after["role"] not in ("assistant", "system")
            turns.append((m["content"], after["content"] if observed else ""))
    return turns


def turn_action(text: str) -> Action | InvalidAction:
    """The action a stored model turn stands for: reasoning (<think>...</think>) set
    aside, then a text action, else a tool call. Reads any run's turns without its
    configuration: a tool-call turn is never a valid text action. A harmony turn
    (gpt-oss) stands for its call, else for its final answer."""
    if harmony.MESSAGE in text:
        call = parse_tool_call(text, "harmony")
        said = harmony.answer(text)
        if isinstance(call, Action) or isinstance(said, InvalidAction):
            return call
        text = said
    _, text = split_reasoning(text)
    if text is None:
        return InvalidAction("reasoning never closed")
    action = parse_action(text)
    if not isinstance(action, InvalidAction):
        return action
    call = parse_tool_call(text)  # every family's format: a stored turn carries no run configuration
    return call if isinstance(call, Action) or CALL_OPEN in text else action


def attempt_stats(conversation: str, resolved: bool, messages: list[dict[str, str]] | None = None) -> AttemptStats:
    """Attempts of one episode from its messages when the agent loop kept them (any chat
    template), else from its decoded conversation in this project's framing, and its grade.

    The agent loop appends no observation after the turn that ends an episode, so
    the last edit of an episode shows only as that turn."""
    turns = message_turns(messages) if messages else conversation_turns(conversation)
    failed: list[tuple] = []
    repeats = 0
    last_edit: tuple | None = None
    for action_text, observation in turns:
        action = turn_action(action_text)
        if not isinstance(action, Action) or action.tool not in EDIT_TOOLS:
            continue
        key = (action.tool, action.path, action.line, action.scope, action.body, action.old, action.new)
        if observation and _REVERTED.search(observation):
            repeats += key in failed
            failed.append(key)
        elif not observation:
            last_edit = key
    if last_edit is None:
        return AttemptStats(len(failed), False, repeats)
    # An edit with no observation after it ended the episode: it was tested, and it
    # passed (resolved) or was the last attempt allowed.
    repeats += last_edit in failed
    return AttemptStats(len(failed) + 1, resolved and not failed, repeats)


def mcnemar_p(before: list[bool], after: list[bool]) -> float:
    """Exact two-sided McNemar test of paired outcomes (same tasks before and after):
    only the discordant pairs count, and under no change each way is a fair coin."""
    if len(before) != len(after):
        raise ValueError(f"mcnemar_p: {len(before)} outcomes before, {len(after)} after; pair the same tasks")
    b = sum(x and not y for x, y in zip(before, after))
    c = sum(y and not x for x, y in zip(before, after))
    n = b + c
    if n == 0:
        return 1.0
    from math import comb

    tail = sum(comb(n, i) for i in range(0, min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap_interval(
    before: list[bool], after: list[bool], level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the gain mean(after) - mean(before) (a fraction; x100 for
    points) from resampling tasks with replacement: each task keeps its pair, so what
    varies is which tasks were drawn, as in McNemar's test."""
    if len(before) != len(after):
        raise ValueError(f"paired_bootstrap_interval: {len(before)} outcomes before, {len(after)} after")
    if not before:
        raise ValueError("paired_bootstrap_interval: no tasks")
    diff = np.asarray(after, np.float64) - np.asarray(before, np.float64)  # per task: -1, 0 or 1
    rng = np.random.default_rng(seed)
    # [resamples, tasks] indices; 10,000 x 500 int64 is 40 MB, drawn in chunks to stay small.
    gains = np.concatenate(
        [
            diff[rng.integers(0, len(diff), size=(min(1000, resamples - i), len(diff)))].mean(axis=1)
            for i in range(0, resamples, 1000)
        ]
    )
    tail = (1 - level) / 2
    low, high = np.quantile(gains, [tail, 1 - tail])
    return float(low), float(high)
