import torch
from torch import nn

from engines.trainer.grad_clip import clip_grad_norm


def _grads(seed: int) -> list[nn.Parameter]:
    torch.manual_seed(seed)
    params = [nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(2))]
    for p in params[:2]:  # the last has no gradient
        p.grad = torch.randn_like(p) * 3
    return params


def test_norm_and_clipped_gradients_match_torch():
    ours, theirs = _grads(0), _grads(0)
    norm = clip_grad_norm(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert abs(norm - float(expected)) < 1e-5
    for a, b in zip(ours[:2], theirs[:2]):
        torch.testing.assert_close(a.grad, b.grad)


def test_below_the_bound_nothing_changes():
    params = _grads(1)
    before = [p.grad.clone() for p in params[:2]]
    norm = clip_grad_norm(params, 1e6)
    assert norm > 0
    for p, g in zip(params[:2], before):
        assert torch.equal(p.grad, g)


def test_expert_parameters_count_in_the_norm_without_a_group():
    params = _grads(2)
    together = clip_grad_norm(params, 1e6)
    split = clip_grad_norm(params, 1e6, expert_params=[params[0]])
    assert abs(together - split) < 1e-6 * together
