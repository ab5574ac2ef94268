import math

import pytest
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums, token_logprobs

# Three loss tokens and one masked-out position; ratios e^0.5, e^-0.5, 1.
LP = [0.0, -1.5, -0.5, -2.0]
Q = [-0.5, -1.0, -0.5, -9.0]
A = [1.0, -1.0, 2.0, 5.0]
MASK = [True, True, True, False]


def _sums(loss_type, **kw):
    lp = torch.tensor(LP, requires_grad=True)
    cfg = TrainerConfig(loss_type=loss_type, ratio_low=0.8, ratio_high=1.2, **kw)
    s = rl_loss_sums(lp, torch.tensor(Q), torch.tensor(A), torch.tensor(MASK), cfg)
    s.loss.backward()
    return s, lp.grad


def test_masked_ratio_by_hand():
    s, grad = _sums("masked_ratio")
    r0, r1 = math.exp(0.5), math.exp(-0.5)
    # token 0: A>0, r=1.65>1.2 -> masked; token 1: A<0, r=0.61<0.8 -> masked; token 2: r=1 kept
    assert s.loss.item() == pytest.approx(-1.0 * 2.0)
    assert s.tokens == 3 and s.masked == 2
    assert grad.tolist() == pytest.approx([0.0, 0.0, -2.0, 0.0])  # d(-r A)/d lp = -r A
    assert s.mismatch_kl == pytest.approx((r0 - 1 - 0.5) + (r1 - 1 + 0.5))


def test_masked_ratio_keeps_tokens_moving_against_the_advantage():
    lp = torch.tensor([-1.0, -0.5], requires_grad=True)  # ratios e^-0.5 (A>0) and e^0.5 (A<0)
    cfg = TrainerConfig()
    s = rl_loss_sums(lp, torch.tensor([-0.5, -1.0]), torch.tensor([1.0, -1.0]), torch.tensor([True, True]), cfg)
    assert s.masked == 0
    assert s.loss.item() == pytest.approx(-math.exp(-0.5) + math.exp(0.5))


def test_ppo_clip_by_hand():
    s, grad = _sums("ppo_clip")
    # ratios exp(0.5) and exp(-0.5): token 0: min(r0*1, 1.2*1) = 1.2 (clipped, no grad); token 1: min(-r1, -0.8) = -0.8 (clipped)
    # token 2: 1*2
    assert s.loss.item() == pytest.approx(-(1.2 - 0.8 + 2.0))
    assert grad.tolist() == pytest.approx([0.0, 0.0, -2.0, 0.0])
    assert s.masked == 2


def test_tis_by_hand():
    s, grad = _sums("tis")
    r1 = math.exp(-0.5)
    w = [1.2, r1, 1.0]  # ratio capped at 1.2, detached
    expected = -(w[0] * 1.0 * LP[0] + w[1] * -1.0 * LP[1] + w[2] * 2.0 * LP[2])
    assert s.loss.item() == pytest.approx(expected)
    assert grad.tolist() == pytest.approx([-1.2, r1, -2.0, 0.0])
    assert s.masked == 1


def test_kl_term_by_hand():
    s, _ = _sums("masked_ratio", kl_coef=0.1)
    assert s.loss.item() == pytest.approx(-2.0 + 0.1 * 0.5 * (0.25 + 0.25 + 0.0))


def test_token_logprobs_divide_logits_by_temperature():
    logits = torch.tensor([[2.0, 0.0, -2.0]])
    lp, ent = token_logprobs(logits, torch.tensor([0]), temperature=2.0)
    ref = torch.log_softmax(torch.tensor([1.0, 0.0, -1.0]), -1)
    assert lp.item() == pytest.approx(ref[0].item())
    assert ent.item() == pytest.approx(-(ref.exp() * ref).sum().item())


def test_config_rejects_bad_betas():
    with pytest.raises(ValueError, match="betas"):
        TrainerConfig(betas=(0.9, 1.0))
