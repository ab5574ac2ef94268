import pytest
import torch

from engines.trainer.router_replay import RouterReplay, find_routers, max_violation


def _ids(model, n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, model.config.vocab_size, (1, n), generator=g)


def test_replaying_live_routes_changes_nothing(tiny_model):
    ids = _ids(tiny_model)
    with RouterReplay(tiny_model) as replay, torch.no_grad():
        live = tiny_model(input_ids=ids).logits
        routes = torch.stack(replay.used, 1)  # [tokens, layers, k]
        replay.set_routes(routes)
        again = tiny_model(input_ids=ids).logits
    torch.testing.assert_close(live, again)


def test_recorded_routes_are_used_exactly_and_router_gets_gradient(tiny_model):
    ids = _ids(tiny_model)
    layers, k, E = len(find_routers(tiny_model)), tiny_model.config.num_experts_per_tok, tiny_model.config.num_experts
    g = torch.Generator().manual_seed(1)
    routes = torch.argsort(torch.rand(ids.shape[1], layers, E, generator=g), -1)[..., :k]  # distinct experts
    with RouterReplay(tiny_model) as replay:
        with torch.no_grad():
            live = tiny_model(input_ids=ids).logits
            live_routes = torch.stack(replay.used, 1)
        assert not torch.equal(live_routes, routes)
        replay.set_routes(routes)
        out = tiny_model(input_ids=ids).logits
        assert torch.equal(torch.stack(replay.used, 1), routes)
        assert not torch.allclose(out, live)
        out.logsumexp(-1).mean().backward()
    for router in find_routers(tiny_model):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_hooks_are_removed_on_close(tiny_model):
    replay = RouterReplay(tiny_model)
    replay.set_routes(torch.zeros(3, 4, 2, dtype=torch.long))
    replay.close()
    tiny_model(input_ids=_ids(tiny_model, 5))  # routes for 3 tokens would not fit 5: hooks are gone


def test_route_shape_errors_name_the_layout(tiny_model):
    with RouterReplay(tiny_model) as replay:
        with pytest.raises(ValueError, match="MoE layers"):
            replay.set_routes(torch.zeros(5, 3, 2, dtype=torch.long))
        replay.set_routes(torch.zeros(4, 4, 2, dtype=torch.long))
        with pytest.raises(ValueError, match="cover every fed token"):
            tiny_model(input_ids=_ids(tiny_model, 6))


def test_max_violation():
    assert max_violation(torch.full((2, 4), 0.25)) == pytest.approx(0.0)
    assert max_violation(torch.tensor([[0.5, 0.5, 0.0, 0.0]])) == pytest.approx(1.0)
