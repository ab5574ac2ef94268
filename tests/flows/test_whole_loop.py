"""The whole loop against its golden curve: generation on a real vLLM CPU server,
grading in the bubblewrap sandbox, training and weight updates, three seeded steps.
A change that should not move the numbers (a refactor, a move between files) must
reproduce them; one that should rewrites them with `python -m tests.flows.whole_loop
--update` and says why. This test only compares: it never writes the file."""

from __future__ import annotations

import pytest

from tests.flows.whole_loop import STEPS, check_golden, whole_loop

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.sandbox]


def test_a_seeded_run_reproduces_the_golden_curve(tmp_path):
    curve = whole_loop(tmp_path)
    assert [s["policy_version"] for s in curve] == list(range(STEPS))  # each step on the newest weights
    assert all(s["episodes"] == 16 and s["completion_tokens"] > 0 for s in curve), curve
    check_golden(curve)
