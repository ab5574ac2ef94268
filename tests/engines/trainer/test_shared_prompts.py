"""A group's prompt run once for all its samples (engines/trainer/shared_prompts.py):
the same loss, metrics and gradients as every sample carrying its own prompt."""

from __future__ import annotations

import pytest
import torch

from engines.trainer.config import TrainerConfig
from engines.trainer.packing import episodes_from_table
from engines.trainer.rl_step import Trainee, _micro_batches, rl_step, shares_prompts
from engines.trainer.router_replay import RouterReplay
from tests.engines.trainer.rollouts import synthetic_rollouts


def _step(model, table, cfg: TrainerConfig) -> tuple[dict, dict[str, torch.Tensor]]:
    """One rl_step with plain SGD at lr 1 and no clipping: each parameter moves by -grad."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    with RouterReplay(model) as replay:
        metrics = rl_step(Trainee(model, model, opt, sched, replay), table, cfg)
    grads = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(before[n])
    return metrics, grads


@pytest.mark.parametrize("packing", [False, True])
def test_a_shared_prompt_gives_the_loss_and_gradients_of_separate_prompts(tiny_model, packing: bool) -> None:
    """Groups with prompts of different lengths (prefix rows padded), router replay on,
    a token budget small enough that branches of one group land in several micro-batches."""
    table = synthetic_rollouts(
        tiny_model, groups=4, group_size=4, seed=3, prompt_len=(6, 14), completion_len=(2, 12), shared_prompt=True
    )
    # A group whose rewards are all equal is dropped; the rest keep a shared prompt each.
    table = table.set_column(table.schema.get_field_index("reward"), "reward", [[float(i % 2) for i in range(16)]])
    cfg = TrainerConfig(seq_len=32, micro_batch_rows=1, packing=packing, grad_clip=1e9, temperature=0.7)
    eps = episodes_from_table(table)
    shared = _micro_batches(eps, cfg, share=True)
    assert len(shared) > 1 and all(b.prefix is shared[0].prefix for b in shared)  # the prompts run once
    assert sum(b.valid.sum() for b in shared) + shared[0].prefix.valid.sum() < sum(len(e) for e in eps)

    plain, plain_grads = _step(tiny_model, table, cfg.model_copy(update={"shared_prompts": "off"}))
    once, once_grads = _step(tiny_model, table, cfg)
    for key in ("loss", "mismatch_kl", "entropy", "grad_norm", "masked_fraction", "trained_tokens"):
        assert once[key] == pytest.approx(plain[key], rel=1e-5, abs=1e-7), key
    for name, grad in plain_grads.items():
        torch.testing.assert_close(once_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert any(g.abs().sum() > 0 for g in plain_grads.values())


def test_samples_with_their_own_prompts_are_not_grouped(tiny_model) -> None:
    table = synthetic_rollouts(tiny_model, groups=2, group_size=3, seed=1)
    batches = _micro_batches(episodes_from_table(table), TrainerConfig(packing=False), share=True)
    assert all(b.prefix is None for b in batches)


@pytest.mark.parametrize(
    "settings, world",
    [
        ({"shared_prompts": "off"}, 1),
        ({"activation_checkpointing": True}, 1),
        ({"aux_loss_coef": 0.01}, 1),
        ({}, 2),
    ],
)
def test_prompts_are_shared_only_where_one_process_runs_each_layer_once(tiny_model, settings, world) -> None:
    trainee = Trainee(tiny_model, tiny_model, None, None, None, world=world)
    assert shares_prompts(Trainee(tiny_model, tiny_model, None, None, None), TrainerConfig())
    assert not shares_prompts(trainee, TrainerConfig(**settings))
