import numpy as np
import pytest
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.loss import rl_loss_sums
from engines.trainer.packing import episode_from_row, episodes_from_table, make_batch, pack_rows
from engines.trainer.rl_step import Trainee, forward_logprobs, make_optimizer
from engines.trainer.router_replay import RouterReplay
from tests.engines.trainer.rollouts import synthetic_rollouts


def test_episode_convention_targets_and_masks():
    row = dict(
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5, 6],
        loss_mask=[True, False, True],
        completion_logprobs=[-0.1, -0.2, -0.3],
        advantage=0.5,
    )
    e = episode_from_row(row)
    assert e.input_ids.tolist() == [1, 2, 3, 4, 5]
    assert e.targets.tolist() == [2, 3, 4, 5, 6]
    assert e.loss_mask.tolist() == [False, False, True, False, True]
    np.testing.assert_allclose(e.inference_logprobs, [0, 0, -0.1, 0, -0.3])


def test_bad_lengths_name_the_field():
    row = dict(prompt_ids=[1, 2], completion_ids=[3, 4], loss_mask=[True], completion_logprobs=[0.0, 0.0])
    with pytest.raises(ValueError, match="loss_mask has 1 entries for 2"):
        episode_from_row(row, "episode 7")
    row = dict(
        prompt_ids=[1, 2],
        completion_ids=[3, 4],
        loss_mask=[True, True],
        completion_logprobs=[0.0, 0.0],
        routed_experts=bytes(2 * 4 * 2),
        routed_experts_shape=[2, 4, 2],
    )
    with pytest.raises(ValueError, match="covers 2 tokens; expected 3"):
        episode_from_row(row)


def test_first_fit_decreasing_fills_rows_and_refuses_overlong():
    rows = pack_rows([5, 3, 8, 2, 6], seq_len=10)
    assert sorted(i for r in rows for i in r) == [0, 1, 2, 3, 4]
    assert all(sum([5, 3, 8, 2, 6][i] for i in r) <= 10 for r in rows)
    assert len(rows) == 3  # 24 tokens need at least 3 rows of 10
    with pytest.raises(ValueError, match="seq_len=10"):
        pack_rows([11], 10)


def test_packed_loss_equals_unpacked_loss(tiny_model):
    table = synthetic_rollouts(tiny_model, groups=3, group_size=4, seed=1)
    eps = episodes_from_table(table)
    for e, a in zip(eps, np.linspace(-1, 1, len(eps))):
        e.advantage = float(a)
    cfg = TrainerConfig(seq_len=64)
    opt, sched = make_optimizer(tiny_model, cfg)
    with RouterReplay(tiny_model) as replay:
        t = Trainee(tiny_model, tiny_model, opt, sched, replay)

        def total(batch):
            lp, _, _ = forward_logprobs(t, batch, cfg)
            s = rl_loss_sums(lp, batch.inference_logprobs, batch.advantages, batch.loss_mask, cfg)
            tiny_model.zero_grad()
            s.loss.backward()
            return s.loss.item(), tiny_model.model.layers[0].mlp.gate.weight.grad.clone()

        packed = make_batch(eps, cfg.seq_len, packing=True)
        assert packed.input_ids.shape[0] < len(eps)  # really packed
        loss_p, grad_p = total(packed)
        loss_u, grad_u = total(make_batch(eps, cfg.seq_len, packing=False))
    assert loss_p == pytest.approx(loss_u, rel=1e-5)
    torch.testing.assert_close(grad_p, grad_u, rtol=1e-4, atol=1e-6)
