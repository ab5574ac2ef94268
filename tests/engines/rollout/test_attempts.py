"""Attempt statistics read from conversations, the paired McNemar test, and the paired
bootstrap interval of a gain."""

from __future__ import annotations

import math

import pytest

from engines.protocol import parse_action, render_messages
from engines.rollout.attempts import AttemptStats, attempt_stats, mcnemar_p, paired_bootstrap_interval
from engines.tool_calls import render_tool_call
from engines.tool_formats import TOOL_FORMATS


def _conversation(turns: list[tuple[str, str | None]]) -> str:
    messages = [{"role": "user", "content": "m.py\n1 def f(a, b):"}]
    for action, observation in turns:
        messages.append({"role": "assistant", "content": action})
        if observation is not None:
            messages.append({"role": "tool", "content": observation})
    return render_messages(messages)


FAIL = "1 passed, 1 failed\nFAILED test_m.py::test_f_0\nreverted (attempt {} of 3)"


def test_first_attempt_success():
    stats = attempt_stats(_conversation([("edit m.py 2\n    return b", None)]), resolved=True)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (1, True, 0)


def test_a_retry_that_repeats_a_failed_edit_is_counted():
    turns = [
        ("edit m.py 2\n    return a", FAIL.format(1)),
        ("edit m.py 2\n    return a", FAIL.format(2)),
        ("edit m.py 2\n    return b", None),
    ]
    stats = attempt_stats(_conversation(turns), resolved=True)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (3, False, 1)


def test_unresolved_episode_counts_only_tested_edits():
    turns = [("view m.py", "1 def f(a, b):"), ("edit m.py 2\n    return a", FAIL.format(1)), ("submit", None)]
    stats = attempt_stats(_conversation(turns), resolved=False)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (1, False, 0)


def test_the_last_allowed_attempt_has_no_observation_and_still_counts():
    turns = [
        ("edit m.py 2\n    return a", FAIL.format(1)),
        ("edit m.py 3\n    return a", FAIL.format(2)),
        ("edit m.py 2\n    return a", None),
    ]
    stats = attempt_stats(_conversation(turns), resolved=False)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (3, False, 1)


def test_change_attempts_count_and_repeat_by_scope_and_text():
    turns = [
        ("change m.py f\n+\n-", FAIL.format(1)),
        ("change m.py g\n+\n-", FAIL.format(2)),  # another function: not a repeat
        ("change m.py f\n+\n-", None),
    ]
    stats = attempt_stats(_conversation(turns), resolved=False)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (3, False, 1)


def test_attempts_are_read_from_messages_whatever_the_template_framed():
    """Another chat template's text holds none of this project's role tokens; the
    messages the agent loop kept give the same statistics as the tiny framing does."""
    turns = [
        ("edit m.py 2\n    return a", FAIL.format(1)),
        ("edit m.py 2\n    return a", FAIL.format(2)),
        ("edit m.py 2\n    return b", None),
    ]
    messages = [{"role": "system", "content": "tools"}, {"role": "user", "content": "m.py\n1 def f(a, b):"}]
    for action, observation in turns:
        messages.append({"role": "assistant", "content": action})
        if observation is not None:
            messages.append({"role": "tool", "content": observation})
    chatml = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    assert attempt_stats(chatml, resolved=True).attempts == 0  # the text alone is unreadable
    stats = attempt_stats(chatml, resolved=True, messages=messages)
    assert (stats.attempts, stats.first_passed, stats.repeats) == (3, False, 1)
    assert stats == attempt_stats(_conversation(turns), resolved=True)


RETRIES = [
    ("edit m.py 2\n    return a", FAIL.format(1)),
    ("edit m.py 2\n    return a", FAIL.format(2)),
    ("edit m.py 2\n    return b", None),
]


def _messages(turns: list[tuple[str, str | None]], observation_role: str = "tool") -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "tools"}, {"role": "user", "content": "m.py\n1 def f(a, b):"}]
    for action, observation in turns:
        messages.append({"role": "assistant", "content": action})
        if observation is not None:
            messages.append({"role": observation_role, "content": observation})
    return messages


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_tool_call_turns_count_as_the_attempts_they_stand_for(fmt):
    """Native tool calls in every family's format: each turn a call, read as its action
    (these statistics read 0 attempts before; formats without `<tool_call>` read 0 until
    every format was tried)."""
    calls = [(render_tool_call(parse_action(a), fmt), o) for a, o in RETRIES]
    stats = attempt_stats("", resolved=True, messages=_messages(calls))
    assert (stats.attempts, stats.first_passed, stats.repeats) == (3, False, 1)
    assert stats == attempt_stats(_conversation(RETRIES), resolved=True)
    first = [(render_tool_call(parse_action("edit m.py 2\n    return b")), None)]
    assert attempt_stats("", resolved=True, messages=_messages(first)) == AttemptStats(1, True, 0)


def test_a_thinking_models_turns_count_by_the_action_after_their_reasoning():
    thought = [(f"<think>\ntry {i}\n</think>\n\n{a}", o) for i, (a, o) in enumerate(RETRIES)]
    assert attempt_stats("", resolved=True, messages=_messages(thought)) == AttemptStats(3, False, 1)
    calls = [(f"<think>try</think>{render_tool_call(parse_action(a))}", o) for a, o in RETRIES]
    assert attempt_stats("", resolved=True, messages=_messages(calls)) == AttemptStats(3, False, 1)
    # Reasoning never closed is no attempt, whatever it mentions.
    unclosed = [("<think>\nedit m.py 2\n    return a", "error: reasoning"), *RETRIES[2:]]
    assert attempt_stats("", resolved=True, messages=_messages(unclosed)) == AttemptStats(1, True, 0)


def test_harmony_turns_count_by_their_final_answer_never_their_analysis():
    """gpt-oss's turns: reasoning on the analysis channel, then the answer (or a call, as above)."""
    thought = "<|channel|>analysis<|message|>edit m.py 2 again?<|end|><|start|>assistant"
    finals = [(f"{thought}<|channel|>final<|message|>{a}", o) for a, o in RETRIES]
    assert attempt_stats("", resolved=True, messages=_messages(finals)) == AttemptStats(3, False, 1)
    cut = [("<|channel|>analysis<|message|>edit m.py 2\n    return a", "error: no answer"), *RETRIES[2:]]
    assert attempt_stats("", resolved=True, messages=_messages(cut)) == AttemptStats(1, True, 0)


def test_observations_in_a_user_turn_count_as_the_tool_ones():
    """A template without a tool role gets the observations as user turns (ChatFormat.observation_role)."""
    stats = attempt_stats("", resolved=True, messages=_messages(RETRIES, observation_role="user"))
    assert stats == AttemptStats(3, False, 1)


def test_mcnemar_matches_the_binomial_formula():
    before = [True] * 10 + [False] * 20 + [True] * 5
    after = [False] * 10 + [True] * 20 + [True] * 5  # 10 lost, 20 gained, 5 kept
    expected = 2 * sum(math.comb(30, i) for i in range(11)) / 2**30
    assert mcnemar_p(before, after) == pytest.approx(expected)
    assert mcnemar_p(before, before) == 1.0
    assert mcnemar_p([False] * 12, [True] * 12) == pytest.approx(2 / 2**12)
    with pytest.raises(ValueError, match="pair the same tasks"):
        mcnemar_p([True], [True, False])


def test_bootstrap_interval_of_a_gain_every_task_shares_is_that_gain():
    assert paired_bootstrap_interval([False] * 5, [True] * 5) == (1.0, 1.0)
    assert paired_bootstrap_interval([True, False, True], [True, False, True]) == (0.0, 0.0)


def test_bootstrap_interval_of_two_tasks_spans_their_resample_means():
    # Per-task gains [0, 1]: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4,
    # so the 2.5% and 97.5% quantiles are 0 and 1.
    assert paired_bootstrap_interval([False, False], [False, True]) == (0.0, 1.0)


def test_bootstrap_interval_matches_the_normal_approximation_on_many_tasks():
    # 100 tasks: 30 gained, 10 lost, 60 unchanged. Gain 0.2; per-task variance
    # 0.4 - 0.2^2 = 0.36, standard error 0.6 / 10 = 0.06: 0.2 +- 1.96 * 0.06.
    before = [False] * 30 + [True] * 10 + [False] * 30 + [True] * 30
    after = [True] * 30 + [False] * 10 + [False] * 30 + [True] * 30
    low, high = paired_bootstrap_interval(before, after)
    assert low == pytest.approx(0.2 - 1.96 * 0.06, abs=0.015)
    assert high == pytest.approx(0.2 + 1.96 * 0.06, abs=0.015)
    assert paired_bootstrap_interval(before, after) == (low, high)  # seeded: the same interval again


def test_bootstrap_interval_needs_paired_outcomes():
    with pytest.raises(ValueError, match="2 outcomes before, 1 after"):
        paired_bootstrap_interval([True, False], [True])
