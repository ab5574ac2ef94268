"""On-policy RL end to end in the trainer: sample from the model, reward, rl_step, repeat.

A one-token bandit: completions that start with a token of a fixed target set
(about a tenth of the vocabulary) earn 1. Sampling, recorded logprobs and routes
come from the model itself, as inference records them; group advantages, packing,
router replay, the masked-ratio loss and AdamW then have to raise the probability
of the target set. A sign error anywhere in that chain makes it fall.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.engines.trainer.golden_curve import bandit_run, check_golden

# The golden curve: this seeded run's per-step reward and loss. A change that should
# not move the numbers (a refactor, a move between files) must reproduce them; one
# that should (a new loss) rewrites them with
# `python -m tests.engines.trainer.golden_curve --update` and says why. This test
# only compares: it never writes the file it compares against.


@pytest.mark.slow
def test_on_policy_steps_raise_the_rewarded_tokens_probability(tiny_model):
    run = bandit_run(tiny_model)
    rewards = run.curve["reward"]
    assert 0.05 < run.before < 0.2, run.before
    assert run.after > 3 * run.before, (run.before, run.after, rewards)
    assert np.mean(rewards[-3:]) > np.mean(rewards[:3]) + 0.2, rewards
    check_golden(run.curve)
